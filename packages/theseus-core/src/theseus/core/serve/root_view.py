"""Everything the web view shows, read from one root and nothing else.

Only these are read under a run: ``job.json``, ``config.yaml`` (credential-named values
redacted), ``metrics.jsonl``, ``summary.json``, ``evaluations/step-<k>.json``,
``results.json``, the tail of ``logs/run.log`` and the names of ``checkpoints/<step>``.
Nothing else is served: there is no route that takes a file path. A run name is checked
like any run name (no separators, no ``..``) and a run folder or file that resolves outside
the root (a symlink) is refused. Each is read only if it is a regular file, and only up to
a bound (:mod:`theseus.core.serve.files`): a FIFO, a device or a huge file is a problem
shown, never a request that hangs. The runs table and the lineage read each run beside the
request (:mod:`theseus.core.serve.background`): a run that is slow to read is shown as
"reading" while the others are answered.

A damaged file never fails a page: each answer carries ``problems`` naming the file and what
is wrong, and what could be read is still shown. Records and configs are shown with
credentials redacted (:mod:`theseus.core.serve.config_view`). A run whose record says
"running" but whose lock no process holds is shown as ``died`` (:mod:`theseus.core.liveness`).
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
from theseus.core.inspect.runs import (
    lineage,
    placeholder_row,
    run_folders,
    run_summary,
    tail_rows,
    unreadable_row,
)
from theseus.core.jobs import check_run_name, parse_reference
from theseus.core.liveness import shown_status
from theseus.core.rundir import RunDir, parse_record
from theseus.core.serve import config_view
from theseus.core.serve.background import Background
from theseus.core.serve.file_memo import FileMemo
from theseus.core.serve.files import NotServed, open_regular, read_small
from theseus.core.serve.metrics_cache import MetricsCache, MetricsFile, decimate

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
        self.reads = Background()  # per-run reads of the table and the lineage

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
            return read_small(path).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None
        except NotServed as error:
            problems.append(str(error))
            return None
        except OSError as error:
            problems.append(f"{path.name} cannot be read: {error.strerror or error}")
            return None

    @staticmethod
    def read_record(record_path: Path) -> dict[str, Any]:
        """A ``job.json`` read as the view reads files (regular, bounded); ``JobError``."""
        try:
            data = read_small(record_path)
        except FileNotFoundError as error:
            raise JobError(f"{record_path} is missing") from error
        except NotServed as error:
            raise JobError(str(error)) from error
        except OSError as error:
            raise JobError(f"{record_path} cannot be read: {error.strerror or error}") from error
        return parse_record(record_path, data)

    def _read_json(self, path: Path, problems: list[str]) -> Any:
        text = self._read_text(path, problems)
        if text is None:
            return None
        try:
            return config_view.redact_tree(json.loads(text))
        except json.JSONDecodeError as error:
            problems.append(f"{path.name} is not valid JSON: {error}")
            return None

    # the runs table
    def runs(self) -> list[dict[str, Any]]:
        if not self.runs_dir.is_dir():
            return []
        deadline = Background.deadline()
        pending = [
            (path.name, self.reads.start(("row", path.name), partial(self._row, path)))
            for path in run_folders(self.runs_dir)
            if self.inside(path)  # a symlink out of the root is not a run of this root
        ]
        rows = []
        for name, future in pending:
            done, row = Background.wait(future, deadline)
            rows.append(row if done else _still_reading(name))
        return rows

    def _row(self, path: Path) -> dict[str, Any]:
        """One run's row of the table (on a worker of ``self.reads``)."""
        outside = [f.name for f in self._run_files(path) if f.exists() and not self.inside(f)]
        if outside:
            return unreadable_row(path.name, f"{outside[0]} resolves outside the root")
        row = self.memo.get(
            ("row", path.name),
            self._run_files(path),
            partial(run_summary, path, _table_rows, self.read_record),
        )
        if row.get("status") == "running":  # asked again each time: the files do not change
            row = {**row, "status": shown_status(path, "running")}  # when a process dies
        return row

    @staticmethod
    def _run_files(path: Path) -> list[Path]:
        """The files a table row is made of (``config.yaml``: the parent of a run started
        from ``init.checkpoint``)."""
        return [path / "job.json", path / "metrics.jsonl", path / "config.yaml"]

    # one run
    def run(self, name: str) -> dict[str, Any]:
        run = self.run_dir(name)
        problems: list[str] = []
        record = None
        if not run.record_path.exists():
            problems.append("job.json is missing")
        elif self.inside(run.record_path):
            try:
                record = self.read_record(run.record_path)
            except JobError as error:
                problems.append(str(error).replace(str(run.path) + "/", ""))
        else:
            problems.append("job.json resolves outside the root; it is not served")
        if record is not None:
            status = shown_status(run.path, record.get("status"))
            if status != record.get("status"):
                problems.append(
                    "job.json says running, but no process holds the run's lock: it died "
                    "without a word (killed, or crashed); run the same command to resume it"
                )
            record = config_view.redact_json({**record, "status": status})
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
            return self.read_record(record_path)
        except JobError:
            return None

    def _lineage(self, record: dict[str, Any] | None) -> list[str]:
        """Parents as ``RUN@STEP``, nearest first, up to the first whose folder resolves
        outside the root (its own record is not read)."""
        chain = lineage(self.root, record, self.read_record) if record else []
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
            source = payload.get("source")
            source = source if isinstance(source, dict) else {}
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
        try:
            return self.metrics.read(run.metrics_path, use)
        except NotServed as error:
            raise Forbidden(f"{run.name}/{error}") from error

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
        try:
            descriptor, size = open_regular(path)
        except FileNotFoundError:
            return {"name": name, "lines": [], "truncated": False, "problems": []}
        except NotServed as error:
            return {"name": name, "lines": [], "truncated": False, "problems": [str(error)]}
        try:
            os.lseek(descriptor, max(0, size - LOG_TAIL_BYTES), os.SEEK_SET)
            data = os.read(descriptor, LOG_TAIL_BYTES)
        finally:
            os.close(descriptor)
        text = config_view.redact_lines(data.decode("utf-8", errors="replace").splitlines())
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

    def _records(self, deadline: float) -> list[tuple[str, dict[str, Any] | None]]:
        """(name, record or None when unreadable or still being read at ``deadline``) of
        every run folder inside the root."""
        if not self.runs_dir.is_dir():
            return []
        pending = []
        for path in run_folders(self.runs_dir):
            if self.inside(path):
                read = partial(
                    self.memo.get,
                    ("record", path.name),
                    [path / "job.json"],
                    partial(self._record, path),
                )
                pending.append((path.name, self.reads.start(("record", path.name), read)))
        return [(name, Background.wait(future, deadline)[1]) for name, future in pending]

    def _references(self, name: str) -> dict[str, tuple[str, int | None]]:
        """The runs a run's saved config names (``init.checkpoint``, ``evaluate.checkpoint``,
        ``hf.run``...: any key ending in ``.run`` or ``.checkpoint`` whose value is
        ``RUN[@STEP]``), re-read only when ``config.yaml`` changed."""
        path = self.runs_dir / name / "config.yaml"
        return self.memo.get(("references", name), [path], lambda: self._read_references(path))

    def _read_references(self, path: Path) -> dict[str, tuple[str, int | None]]:
        references: dict[str, tuple[str, int | None]] = {}
        text = self._read_text(path, [])
        if not text:
            return references
        values, _ = config_view.parse(text)
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
        deadline = Background.deadline()
        records = self._records(deadline)
        started = {
            name: self.reads.start(("references", name), partial(self._references, name))
            for name, _ in records
        }
        references = {
            name: Background.wait(future, deadline)[1] or {} for name, future in started.items()
        }
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
                    "status": shown_status(self.runs_dir / name, record.get("status"))
                    if record
                    else "unreadable",
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
    try:
        return tail_rows(run_path / "metrics.jsonl", TABLE_METRIC)
    except (NotServed, OSError):
        return []  # the run's page names the problem; the table shows no loss


def _still_reading(name: str) -> dict[str, Any]:
    """The row of a run whose files were not read by the deadline (the read goes on)."""
    return placeholder_row(name, "reading", "its files are slow to read; shown when they are read")
