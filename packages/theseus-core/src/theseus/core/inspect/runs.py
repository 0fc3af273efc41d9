"""Runs under a root: a table of them, and one run in detail.

Everything here only reads. A damaged file never ends a listing: ``run_summaries`` flags the
run (status ``unreadable``) and logs one line naming the file; unreadable metric lines are
skipped with one line naming the file and the line numbers. Only what a command cannot do
without (the record ``show`` was asked for) is an error.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from theseus.core import safe_json, safe_yaml
from theseus.core.errors import JobError
from theseus.core.jobs import job_kind
from theseus.core.liveness import shown_status
from theseus.core.regular_files import open_regular, read_all, read_small
from theseus.core.rundir import RunDir, missing_run, read_record

log = logging.getLogger(__name__)


def parse_metric_line(raw: bytes) -> dict[str, Any] | str:
    """One ``metrics.jsonl`` line as a row, or what is wrong with it."""
    try:
        row = safe_json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8"
    except json.JSONDecodeError:
        return "not JSON"
    return row if isinstance(row, dict) else "not a JSON object"


def parse_metric_lines(data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows in ``data`` and the unreadable lines as ``"N (problem)"``.

    A last line without its newline that is text but not JSON is a write cut short by a crash
    (the writer emits ASCII): it is dropped silently.
    """
    lines = data.split(b"\n")
    cut_short = lines[-1] != b""  # the last line has no newline
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        row = parse_metric_line(raw)
        if isinstance(row, dict):
            rows.append(row)
        elif not (cut_short and number == len(lines) and row == "not JSON"):
            bad.append(f"{number} ({row})")
    return rows, bad


def read_metrics(run_path: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` that can be read.

    Lines that are not UTF-8 or not a JSON object are skipped, and one warning names the file
    and the line numbers (a last line cut short by a crash is dropped silently).
    """
    path = run_path / "metrics.jsonl"
    try:
        data = read_all(path)  # not a FIFO: a listing never hangs
    except FileNotFoundError:
        return []
    except OSError as error:
        log.warning("%s cannot be read (%s); no metrics shown", path, error.strerror or error)
        return []
    rows, bad = parse_metric_lines(data)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        log.warning("%s: skipped unreadable line%s %s", path, "s" if len(bad) > 1 else "", shown)
    return rows


TAIL_LIMIT = 16 * 1024 * 1024


def tail_rows(path: Path, metric: str, chunk: int = 64 * 1024) -> list[dict[str, Any]]:
    """Rows from the end of ``path``, read backwards until one holds ``metric`` (or the file
    is read whole, or :data:`TAIL_LIMIT` bytes were): what a runs table needs without reading
    long logs in full. Only a regular file is read (NotServed otherwise)."""
    try:
        descriptor, size = open_regular(path)
    except FileNotFoundError:
        return []
    try:
        while True:
            start = max(0, size - chunk)
            os.lseek(descriptor, start, os.SEEK_SET)
            data = os.read(descriptor, size - start)
            if start > 0:
                data = data[data.find(b"\n") + 1 :]  # the first line read may be cut
            rows, _ = parse_metric_lines(data)
            if start == 0 or chunk >= TAIL_LIMIT or any(metric in row for row in rows):
                return rows
            chunk *= 4
    finally:
        os.close(descriptor)


def table_rows(run_path: Path) -> list[dict[str, Any]]:
    """The rows a runs table needs: all of ``metrics.jsonl`` up to :data:`TAIL_LIMIT` (its
    unreadable lines named, as ``show`` names them), only its end beyond (a long file is never
    read whole for one row); none when it cannot be read (``show`` names the problem)."""
    path = run_path / "metrics.jsonl"
    try:
        if path.stat().st_size <= TAIL_LIMIT:
            return read_metrics(run_path)
        return tail_rows(path, "train/loss")
    except OSError:
        return []


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def last_value(rows: list[dict], metric: str) -> tuple[int | None, float | None]:
    for row in reversed(rows):
        if is_number(row.get(metric)):
            step = row.get("step")
            return (step if isinstance(step, int) else None), row[metric]
    return None, None


def reached_step(rows: list[dict], record: dict[str, Any]) -> int | None:
    """How many steps the run has done: the newest step of its metrics or its checkpoints.

    A training row ``step k`` holds the loss of the state after k updates, so a run of 100
    steps logs its last training loss at step 99 and its final evaluation and checkpoint at
    step 100: the table shows 100."""
    steps = [row["step"] for row in rows if isinstance(row.get("step"), int)]
    checkpointed = record.get("checkpoint_step")
    if isinstance(checkpointed, int) and not isinstance(checkpointed, bool):
        steps.append(checkpointed)
    return max(steps) if steps else None


def sorted_for_listing(summaries: list[dict[str, Any]], kind: str = "") -> list[dict[str, Any]]:
    """Trainings first, then the other kinds by name; within each kind by run name. ``kind``:
    only runs of that kind (``train``, ``data``, ``export``, ...)."""
    chosen = [s for s in summaries if not kind or s.get("kind") == kind]
    return sorted(chosen, key=lambda s: (s.get("kind") != "train", s.get("kind") or "~", s["name"]))


def placeholder_row(name: str, status: str, problem: str) -> dict[str, Any]:
    """A run's row with ``status`` and ``problem`` and none of its figures (nothing was read)."""
    return {
        "name": name,
        "key": None,
        "kind": None,
        "status": status,
        "step": None,
        "loss": None,
        "parent": None,
        "started": None,
        "dispatched": None,
        "host": None,
        "problem": problem,
    }


def unreadable_row(name: str, problem: str) -> dict[str, Any]:
    log.warning("run %r is unreadable: %s", name, problem)
    return placeholder_row(name, "unreadable", problem)


def run_summaries(
    root: str | Path, metrics: Callable[[Path], list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """One dict per run: name, job key, status, step, last loss, parent, start time, where it
    was dispatched.

    A folder under ``runs/`` whose ``job.json`` is missing or damaged is listed with status
    ``unreadable`` and a ``problem`` naming the file; hidden folders (locks) are not runs.
    ``metrics`` reads a run folder's metric rows (``theseus serve`` passes a cached reader).
    """
    runs_dir = Path(root) / "runs"
    if not runs_dir.is_dir():
        raise JobError(f"no runs under {root} (expected a folder {runs_dir})")
    return [run_summary(path, metrics or table_rows) for path in run_folders(runs_dir)]


def run_folders(runs_dir: Path) -> list[Path]:
    """The run folders under ``runs_dir``, sorted (hidden folders hold locks)."""
    return sorted(p for p in runs_dir.iterdir() if not p.name.startswith(".") and p.is_dir())


def run_summary(
    path: Path,
    metrics: Callable[[Path], list[dict[str, Any]]] = read_metrics,
    read: Callable[[Path], dict[str, Any]] = read_record,
) -> dict[str, Any]:
    """One run folder's row of the runs table (status ``unreadable`` with a ``problem``).
    ``read`` reads ``job.json`` (``theseus serve`` passes its bounded reader)."""
    record_path = path / "job.json"
    if not record_path.exists():
        return unreadable_row(path.name, f"{record_path} is missing")
    try:
        record = read(record_path)
    except JobError as error:
        return unreadable_row(path.name, str(error))
    rows = metrics(path)
    _, loss = last_value(rows, "train/loss")
    key = record.get("key")
    return {
        "name": path.name,
        "key": key,
        "kind": job_kind(key) if isinstance(key, str) and key else None,
        "status": shown_status(path, record.get("status")),  # "died": running, lock free
        "step": reached_step(rows, record),
        "loss": loss,
        "parent": record.get("parent") or started_from(path / "config.yaml"),
        "started": record.get("started") or record.get("created"),
        "dispatched": record.get("dispatched"),
        "host": record.get("host"),
        "problem": None,
    }


def started_from(config_path: Path) -> str | None:
    """The run whose weights a run started from (``init.checkpoint=RUN[@STEP]`` in its saved
    config), its parent when it was not branched; None when there is none or the config
    cannot be read (``theseus show`` names that problem)."""
    try:
        config = safe_yaml.load(read_small(config_path))
    except (OSError, yaml.YAMLError):  # missing, not a regular file, too large, not YAML
        return None
    init = config.get("init") if isinstance(config, dict) else None
    source = init.get("checkpoint") if isinstance(init, dict) else None
    return source if isinstance(source, str) and source else None


def lineage(
    root: str | Path,
    record: dict[str, Any],
    read: Callable[[Path], dict[str, Any]] = read_record,
) -> list[str]:
    """Parents as ``RUN@STEP``, nearest first; a parent whose record is damaged ends it.
    ``read`` reads a ``job.json`` (``theseus serve`` passes its bounded reader)."""

    lineage: list[str] = []
    parent = record.get("parent")
    while isinstance(parent, str) and parent and len(lineage) <= 100:
        lineage.append(parent)
        parent_run = RunDir(root, parent.split("@", 1)[0])
        if not parent_run.exists():
            break
        try:
            parent = read(parent_run.record_path).get("parent")
        except JobError as error:
            log.warning("lineage stops at %s: %s", parent, error)
            break
    return lineage


def _config_text(config_path: Path) -> str:
    """The saved config as text; damage is shown, with a warning naming the file."""
    try:
        data = read_small(config_path)
    except FileNotFoundError:
        log.warning("%s is missing", config_path)
        return ""
    except OSError as error:  # a FIFO, a huge file, no permission
        log.warning("%s cannot be read: %s", config_path, error.strerror or error)
        return ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        log.warning("%s is not UTF-8 text (line %d); shown with replacements", config_path, line)
        return data.decode("utf-8", errors="replace")
    try:
        safe_yaml.load(text)
    except yaml.YAMLError as error:
        log.warning("%s is not valid YAML: %s", config_path, safe_yaml.problem(error))
    return text


def run_details(root: str | Path, name: str) -> dict[str, Any]:

    run = RunDir(root, name)
    if not run.exists():
        raise JobError(missing_run(run))
    record = read_record(run.record_path)
    record["status"] = shown_status(run.path, record.get("status"))  # shown, never written
    finals = {}
    for row in read_metrics(run.path):
        for key, value in row.items():
            if key != "step":
                finals[key] = value
    return {
        "record": record,
        "config": _config_text(run.config_path),
        "lineage": lineage(root, record),
        "checkpoints": run.checkpointed_steps(),
        "final_metrics": finals,
    }
