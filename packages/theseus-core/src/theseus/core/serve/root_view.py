"""Everything the web view shows, read from one root and nothing else.

Only these are read under a run: ``job.json``, ``config.yaml`` (credential-named values
redacted), ``metrics.jsonl``, ``summary.json``, ``evaluations/step-<k>.json``,
``results.json``, the tail of ``logs/run.log`` and the names of ``checkpoints/<step>``.
Nothing else is served: there is no route that takes a file path. A run name is checked
like any run name (no separators, no ``..``) and a run folder or file that resolves outside
the root (a symlink) is refused.

A damaged file never fails a page: each answer carries ``problems`` naming the file and what
is wrong, and what could be read is still shown.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from theseus.core.errors import JobError, TheseusError
from theseus.core.inspect.runs import lineage, run_folders, run_summary, unreadable_row
from theseus.core.jobs import check_run_name, parse_reference
from theseus.core.rundir import RunDir, read_record
from theseus.core.serve import config_view
from theseus.core.serve.file_memo import FileMemo
from theseus.core.serve.metrics_cache import MetricsCache, MetricsFile, decimate, tail_rows

LOG_TAIL_BYTES = 256 * 1024
TABLE_METRIC = "train/loss"
REFERENCE_KEYS = ("run", "checkpoint")  # config leaves that name a run: init.checkpoint, ...
_EVALUATION_FILE = re.compile(r"^step-(\d+)\.json$")


class NotFound(TheseusError):
    """No such run (answered 404)."""


class Forbidden(TheseusError):
    """Outside the root (answered 403)."""


class RootView:
    """Read-only access to ``<root>/runs``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).resolve()
        self.runs_dir = self.root / "runs"
        self.metrics = MetricsCache()
        self.memo = FileMemo()  # table rows, records and config references by file stamps

    # where things are
    def inside(self, path: Path) -> bool:
        return path.resolve().is_relative_to(self.root)

    def run_dir(self, name: str) -> RunDir:
        try:
            check_run_name(name)
        except JobError as error:
            raise NotFound(f"no run named {name!r}") from error
        run = RunDir(self.root, name)
        if not run.path.is_dir():
            raise NotFound(f"no run named {name!r} under {self.root}")
        if not self.inside(run.path):
            raise Forbidden(f"run {name!r} resolves outside {self.root}; it is not served")
        return run

    def _read_text(self, path: Path, problems: list[str]) -> str | None:
        if not path.exists():
            return None
        if not self.inside(path):
            problems.append(f"{path.name} resolves outside the root; it is not served")
            return None
        try:
            return path.read_bytes().decode("utf-8", errors="replace")
        except OSError as error:
            problems.append(f"{path.name} cannot be read: {error.strerror or error}")
            return None

    def _read_json(self, path: Path, problems: list[str]) -> Any:
        text = self._read_text(path, problems)
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            problems.append(f"{path.name} is not valid JSON: {error}")
            return None

    # the runs table
    def runs(self) -> list[dict[str, Any]]:
        if not self.runs_dir.is_dir():
            return []
        rows = []
        for path in run_folders(self.runs_dir):
            if not self.inside(path):
                continue  # a symlink out of the root is not a run of this root
            outside = [f.name for f in self._run_files(path) if f.exists() and not self.inside(f)]
            if outside:
                rows.append(unreadable_row(path.name, f"{outside[0]} resolves outside the root"))
                continue
            rows.append(
                self.memo.get(
                    ("row", path.name),
                    self._run_files(path),
                    partial(run_summary, path, _table_rows),
                )
            )
        return rows

    @staticmethod
    def _run_files(path: Path) -> list[Path]:
        """The files a table row is made of."""
        return [path / "job.json", path / "metrics.jsonl"]

    # one run
    def run(self, name: str) -> dict[str, Any]:
        run = self.run_dir(name)
        problems: list[str] = []
        record = None
        if not run.record_path.exists():
            problems.append("job.json is missing")
        elif self.inside(run.record_path):
            try:
                record = read_record(run.record_path)
            except JobError as error:
                problems.append(str(error).replace(str(run.path) + "/", ""))
        else:
            problems.append("job.json resolves outside the root; it is not served")
        children, used_by = self._derived(name)
        try:
            row_count, bad_lines, names = self._metrics(
                run, lambda f: (f.row_count, list(f.bad_lines), sorted(f.columns))
            )
        except Forbidden as error:
            problems.append(str(error))
            row_count, bad_lines, names = 0, [], []
        if bad_lines:
            shown = ", ".join(bad_lines[:5])
            more = f" and {len(bad_lines) - 5} more" if len(bad_lines) > 5 else ""
            problems.append(f"metrics.jsonl: skipped unreadable lines {shown}{more}")
        return {
            "name": name,
            "record": record,
            "lineage": self._lineage(record),
            "children": children,
            "used_by": used_by,
            "checkpoints": self._checkpoints(run),
            "evaluations": self._evaluations(run, problems),
            "summary": self._read_json(run.path / "summary.json", problems),
            "metric_rows": row_count,
            "metric_names": names,
            "problems": problems,
        }

    def _record(self, path: Path) -> dict[str, Any] | None:
        """A run folder's record; None when damaged or when it resolves outside the root."""
        record_path = path / "job.json"
        if record_path.exists() and not self.inside(record_path):
            return None
        try:
            return read_record(record_path)
        except JobError:
            return None

    def _lineage(self, record: dict[str, Any] | None) -> list[str]:
        """Parents as ``RUN@STEP``, nearest first, up to the first whose folder resolves
        outside the root (its own record is not read)."""
        chain = lineage(self.root, record) if record else []
        for i, reference in enumerate(chain):
            folder = self.runs_dir / reference.split("@", 1)[0]
            if folder.exists() and not self.inside(folder):
                return chain[: i + 1]
        return chain

    def _checkpoints(self, run: RunDir) -> list[int]:
        directory = run.checkpoint_dir
        if not directory.is_dir() or not self.inside(directory):
            return []
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())

    def _evaluations(self, run: RunDir, problems: list[str]) -> list[dict[str, Any]]:
        """``evaluations/step-<k>.json`` (during training) and ``results.json`` (an
        evaluation job) as ``[{"step", "file", "source", "results"}]`` by step."""
        files: list[tuple[int | None, Path]] = []
        folder = run.path / "evaluations"
        if folder.is_dir() and self.inside(folder):
            for path in folder.iterdir():
                match = _EVALUATION_FILE.match(path.name)
                if match:
                    files.append((int(match.group(1)), path))
        if (run.path / "results.json").exists():
            files.append((None, run.path / "results.json"))
        evaluations = []
        for step, path in sorted(files, key=lambda item: (item[0] is None, item[0] or 0)):
            payload = self._read_json(path, problems)
            if not isinstance(payload, dict) or not isinstance(payload.get("results"), dict):
                if payload is not None:
                    problems.append(f"{path.name} has no 'results' mapping")
                continue
            source = payload.get("source") if isinstance(payload.get("source"), dict) else {}
            evaluations.append(
                {
                    "step": step if step is not None else source.get("step"),
                    "file": str(path.relative_to(run.path)),
                    "source": source,
                    "results": payload["results"],
                }
            )
        return evaluations

    def _derived(self, name: str) -> tuple[list[str], list[dict[str, Any]]]:
        """Runs branched from ``name``, and runs whose config names it (``via`` the key)."""
        edges = [e for e in self.lineage()["edges"] if e["from"] == name]
        branches = [e["to"] for e in edges if e["via"] == "branch"]
        used = [
            {"run": e["to"], "via": e["via"], "step": e["step"]}
            for e in edges
            if e["via"] != "branch"
        ]
        return branches, used

    def _metrics(self, run: RunDir, use: Callable[[MetricsFile], Any]) -> Any:
        if run.metrics_path.exists() and not self.inside(run.metrics_path):
            raise Forbidden(f"{run.name}/metrics.jsonl resolves outside the root; not served")
        return self.metrics.read(run.metrics_path, use)

    def metrics_since(
        self, name: str, offset: int = 0, since: int | None = None, version: str = ""
    ) -> dict[str, Any]:
        """Rows after the first ``offset`` (the client's cursor) with step > ``since``.

        When the file was replaced since the client's ``version`` (a resume rewrote it), the
        answer starts over from row 0 with ``reset: true``.
        """

        def answer(metrics: MetricsFile) -> dict[str, Any]:
            reset = bool(version) and version != metrics.version
            rows = metrics.rows(0 if reset else offset)
            if since is not None:
                rows = [r for r in rows if isinstance(r.get("step"), int) and r["step"] > since]
            return {
                "version": metrics.version,
                "offset": metrics.row_count,
                "reset": reset,
                "rows": rows,
                "unreadable_lines": len(metrics.bad_lines),
            }

        return self._metrics(self.run_dir(name), answer)

    def series(self, name: str, metrics: list[str], max_points: int) -> dict[str, Any]:
        """Each metric (every one when ``metrics`` is empty) as ``{"x": steps, "y": values,
        "points": rows}``, decimated to about ``max_points`` (envelope kept), with the
        ``version`` and ``offset`` a client follows the file from afterwards."""

        def answer(file: MetricsFile) -> dict[str, Any]:
            series = {}
            for metric in metrics or sorted(file.columns):
                x, y = file.series(metric)
                shown_x, shown_y = decimate(x, y, max_points)
                series[metric] = {
                    "x": shown_x.tolist(),
                    "y": shown_y.tolist(),
                    "points": len(x),
                }
            return {"version": file.version, "offset": file.row_count, "series": series}

        return self._metrics(self.run_dir(name), answer)

    def config(self, name: str) -> dict[str, Any]:
        run = self.run_dir(name)
        problems: list[str] = []
        text = self._read_text(run.config_path, problems)
        if text is None:
            problems.append("config.yaml is missing")
            return {"name": name, "text": "", "values": {}, "problems": problems}
        values, problem = config_view.parse(text)
        if problem:
            problems.append(f"config.yaml {problem}")
        return {
            "name": name,
            "text": config_view.redact_text(text),
            "values": values,
            "problems": problems,
        }

    def log_tail(self, name: str, lines: int = 200) -> dict[str, Any]:
        run = self.run_dir(name)
        path = run.log_path
        if not path.exists():
            return {"name": name, "lines": [], "truncated": False, "problems": []}
        if not self.inside(path):
            raise Forbidden(f"{name}/logs/run.log resolves outside the root; it is not served")
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            data = handle.read()
        text = data.decode("utf-8", errors="replace").splitlines()
        if size > LOG_TAIL_BYTES:
            text = text[1:]  # the first line read may be cut
        return {
            "name": name,
            "lines": text[-lines:],
            "truncated": size > LOG_TAIL_BYTES or len(text) > lines,
            "problems": [],
        }

    def diff(self, names: list[str]) -> dict[str, Any]:
        """The config keys on which ``names`` differ."""
        configs, problems = {}, []
        for name in names:
            answer = self.config(name)
            configs[name] = answer["values"]
            problems += [f"{name}: {p}" for p in answer["problems"]]
        same = len({k for flat in configs.values() for k in flat})
        rows = config_view.diff(configs)
        return {"runs": names, "rows": rows, "same": same - len(rows), "problems": problems}

    def _records(self) -> list[tuple[str, dict[str, Any] | None]]:
        """(name, record or None when unreadable) of every run folder inside the root."""
        if not self.runs_dir.is_dir():
            return []
        records = []
        for path in run_folders(self.runs_dir):
            if self.inside(path):
                record = self.memo.get(
                    ("record", path.name), [path / "job.json"], partial(self._record, path)
                )
                records.append((path.name, record))
        return records

    def _references(self, name: str) -> dict[str, tuple[str, int | None]]:
        """The runs a run's saved config names (``init.checkpoint``, ``evaluate.checkpoint``,
        ``hf.run``...: any key ending in ``.run`` or ``.checkpoint`` whose value is
        ``RUN[@STEP]``), re-read only when ``config.yaml`` changed."""
        path = self.runs_dir / name / "config.yaml"
        return self.memo.get(("references", name), [path], lambda: self._read_references(path))

    def _read_references(self, path: Path) -> dict[str, tuple[str, int | None]]:
        references: dict[str, tuple[str, int | None]] = {}
        if not path.exists() or not self.inside(path):
            return references
        values, _ = config_view.parse(path.read_bytes().decode("utf-8", errors="replace"))
        for key, value in values.items():
            if key.rsplit(".", 1)[-1] in REFERENCE_KEYS and isinstance(value, str) and value:
                try:
                    references[key] = parse_reference(value, key)
                except JobError:
                    continue
        return references

    def lineage(self) -> dict[str, Any]:
        """Every run as a node; an edge from each parent run to each run branched from it
        (``via: "branch"``) and from each run a config names to the run that names it
        (``via``: the key). A branch inherits its parent's config, so what it names only
        because its parent did is left to the parent's edge."""
        nodes, edges = [], []
        records = self._records()
        references = {name: self._references(name) for name, _ in records}
        for name, record in records:
            record = record or {}
            parent = record.get("parent")
            parent_run, parent_step = None, None
            if isinstance(parent, str) and parent:
                try:
                    parent_run, parent_step = parse_reference(parent, "parent")
                except JobError:
                    parent_run = None
            nodes.append(
                {
                    "name": name,
                    "key": record.get("key"),
                    "status": record.get("status", "unreadable") if record else "unreadable",
                    "started": record.get("started") or record.get("created"),
                    "parent_run": parent_run,
                    "parent_step": parent_step,
                }
            )
            if parent_run:
                edges.append({"from": parent_run, "to": name, "step": parent_step, "via": "branch"})
            inherited = references.get(parent_run, {}) if parent_run else {}
            for key, (run, step) in sorted(references[name].items()):
                if run != name and inherited.get(key) != (run, step):
                    edges.append({"from": run, "to": name, "step": step, "via": key})
        known = {node["name"] for node in nodes}
        for edge in edges:
            edge["parent_known"] = edge["from"] in known
        return {"nodes": nodes, "edges": edges}


def _table_rows(run_path: Path) -> list[dict[str, Any]]:
    return tail_rows(run_path / "metrics.jsonl", TABLE_METRIC)
