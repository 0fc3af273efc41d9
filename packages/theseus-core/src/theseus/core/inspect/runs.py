"""Runs under a root: a table of them, and one run in detail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from theseus.core.errors import JobError


def read_metrics(run_path: Path) -> list[dict[str, Any]]:
    path = run_path / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill; the rest still counts
    return rows


def last_value(rows: list[dict], metric: str) -> tuple[int | None, float | None]:
    for row in reversed(rows):
        if metric in row:
            return row.get("step"), row[metric]
    return None, None


def run_summaries(root: str | Path) -> list[dict[str, Any]]:
    """One dict per run: name, job key, status, step, last loss, parent, start time."""
    runs_dir = Path(root) / "runs"
    if not runs_dir.is_dir():
        raise JobError(f"no runs under {root} (expected a folder {runs_dir})")
    summaries = []
    for path in sorted(runs_dir.iterdir()):
        record_path = path / "job.json"
        if not record_path.exists():
            continue
        record = json.loads(record_path.read_text())
        rows = read_metrics(path)
        step, loss = last_value(rows, "train/loss")
        summaries.append(
            {
                "name": path.name,
                "key": record.get("key"),
                "status": record.get("status"),
                "step": step,
                "loss": loss,
                "parent": record.get("parent"),
                "started": record.get("started") or record.get("created"),
            }
        )
    return summaries


def run_details(root: str | Path, name: str) -> dict[str, Any]:
    from theseus.core.inspect.timetravel import checkpointed_steps
    from theseus.core.rundir import RunDir

    run = RunDir(root, name)
    record = run.read_record()
    rows = read_metrics(run.path)
    finals = {}
    for row in rows:
        for key, value in row.items():
            if key != "step":
                finals[key] = value
    lineage = []
    parent = record.get("parent")
    while parent:
        lineage.append(parent)
        parent_name = parent.split("@", 1)[0]
        parent_run = RunDir(root, parent_name)
        parent = parent_run.read_record().get("parent") if parent_run.exists() else None
        if len(lineage) > 100:
            break
    return {
        "record": record,
        "config": run.config_path.read_text() if run.config_path.exists() else "",
        "lineage": lineage,
        "checkpoints": checkpointed_steps(run.path),
        "final_metrics": finals,
    }
