"""``theseus rebuild-record RUN``: a run whose ``job.json`` is gone gets one again, made from
what its folder still holds.

The job key is the one the run's log names (each attempt writes ``run NAME: job KEY,
attempt N`` into ``logs/run.log``), else the one job whose config ``config.yaml`` fits, else
``--job KEY`` (``pretrain`` and ``sft`` share a schema); the newest committed checkpoint is
its ``checkpoint_step``. What only the lost record knew (the parent it was branched from, its
attempts and history of config changes, the versions it ran with) is not invented: the
record says it was rebuilt, and when. Nothing else in the folder is touched.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from theseus.core.errors import JobError, TheseusError

HOW = "rebuilt from config.yaml and the checkpoints; its parent and history are unknown"


def candidate_jobs(saved: dict[str, Any], registries: Any) -> list[str]:
    """The registered jobs whose config groups are the saved config's top-level keys (and,
    for a model's jobs, whose key names the saved ``model.name``)."""
    model = saved.get("model", {}).get("name") if isinstance(saved.get("model"), dict) else None
    found = []
    for key, spec in registries.jobs.items():
        if set(spec.groups) != set(saved):
            continue
        if model and "model" in spec.groups and not key.startswith(f"{model}/"):
            continue
        found.append(key)
    return sorted(found)


def logged_job(log_path: Path) -> str | None:
    """The job key the newest ``run NAME: job KEY, attempt N`` line of the run's log names."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.findall(r"INFO theseus\.core\.runner: run \S+: job (\S+), attempt \d+", text)
    return found[-1] if found else None  # (a copied run's log names the run it copied)


def rebuild_record(root: str, name: str, job: str | None, registries: Any) -> dict[str, Any]:
    """Write ``<root>/runs/<name>/job.json`` from the folder (see the module docstring);
    ``JobError`` in one line when it cannot be rebuilt."""
    from theseus.core.rundir import RunDir, package_versions
    from theseus.core.runner import config_for, job_spec

    run = RunDir(root, name)
    if not run.path.is_dir():
        raise JobError(f"no run named {name!r} under {root}")
    if run.record_path.exists():
        raise JobError(f"run {name!r} has a job.json ({run.record_path}); nothing to rebuild")
    saved = run.read_config()
    job = job or logged_job(run.log_path)
    if job is None:
        found = candidate_jobs(saved, registries)
        if len(found) != 1:
            listing = ", ".join(found) or "none"
            raise JobError(
                f"run {name!r}: its config.yaml fits {len(found)} jobs ({listing}); name the "
                "run's job with --job KEY"
            )
        job = found[0]
    spec = job_spec(job, registries)
    if set(spec.groups) != set(saved):
        raise JobError(
            f"run {name!r}: its config.yaml has the groups {', '.join(sorted(saved))}; job "
            f"{job} has {', '.join(sorted(spec.groups))}: it is not that job's run"
        )
    try:
        config_for(spec, registries, [], saved).validate()
    except TheseusError as error:  # a key the job does not have, a value it refuses
        raise JobError(
            f"run {name!r}: {run.config_path} does not fit job {job}: {error}"
        ) from error
    steps = run.checkpointed_steps()
    made = dt.datetime.fromtimestamp(run.config_path.stat().st_mtime, dt.UTC)
    record: dict[str, Any] = {
        "key": job,
        "name": name,
        "status": "rebuilt",
        "created": made.isoformat(timespec="seconds"),
        "parent": None,
        "versions": package_versions(),
        "attempts": 0,
        "history": [],
        "checkpoint_step": steps[-1] if steps else 0,
        "rebuilt": {"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "how": HOW},
    }
    run.write_record(record)
    return record


def command(
    run: Annotated[str, typer.Argument(help="the run whose job.json is gone")],
    job: Annotated[
        str | None, typer.Option("--job", help="its job key, when its config fits several")
    ] = None,
    root: Annotated[
        str | None,
        typer.Option("--root", help="root directory (default $THESEUS_ROOT, else ./runs)"),
    ] = None,
) -> None:
    """Rebuild a run's lost job.json from its config.yaml and checkpoints."""
    from theseus.core.plugins import registries
    from theseus.core.runner import default_root

    where = root or default_root()
    record = rebuild_record(where, run, job, registries())
    step = record["checkpoint_step"]
    typer.echo(
        f"rebuilt {where}/runs/{run}/job.json: job {record['key']}, newest checkpoint at step "
        f"{step}; its parent and history are unknown"
    )
