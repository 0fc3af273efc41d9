"""What a resumed run may change, and what it must still have.

A run's config is part of its record. When a run is started again under the same name, the
requested config (the saved one with the command's overrides on top) is compared with the
saved one, key by key, before anything in the run directory is touched:

* a change to a field declared ``resume_safe`` (how long to train, logging, evaluation,
  checkpoint cadence, the layout over devices) is allowed and recorded in the run's history;
* any other change (the model's shape, the optimizer, the data, the seed, ...) is refused in
  one line that names each change, with the two ways forward: ``--fresh`` or ``--branch``,
  unless the run holds nothing yet (its earlier starts failed before any metric, checkpoint
  or result), in which case the change is only recorded.

A run that has checkpointed a step > 0 but whose checkpoints are gone is refused too: it
would otherwise start again from step 0 under the same name. So is a run folder whose records
are gone (:func:`check_records`): without ``job.json`` a run's progress is unknown, and
without ``config.yaml`` its config is, so a start would overwrite what is left with another
config, or start it over under the same name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.config import ConfigTree, flatten
from theseus.core.errors import JobError
from theseus.core.rundir import RunDir, read_record


class ResumeRefusedError(JobError):
    """Starting the run again would damage or silently replace it."""


@dataclass(frozen=True)
class Change:
    key: str
    before: Any
    after: Any
    safe: bool

    def __str__(self) -> str:
        return f"{self.key}: {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def config_changes(saved: ConfigTree, requested: ConfigTree) -> list[Change]:
    """Leaves whose value differs between two trees of one job (keys of both, sorted)."""
    before = dict(flatten(saved.to_container(), tree=saved))
    after = dict(flatten(requested.to_container(), tree=requested))
    return [
        Change(key, before[key], after[key], requested.resume_safe(key))
        for key in sorted(after)
        if key in before and before[key] != after[key]
    ]


def has_progress(run: RunDir, record: dict[str, Any]) -> bool:
    """Whether ``run`` holds anything a config change could damage: it finished, or it
    wrote metrics or checkpoints. A start that failed before any of that holds nothing."""
    metrics = run.metrics_path
    return (
        record.get("status") == "finished"
        or int(record.get("checkpoint_step") or 0) > 0
        or bool(run.checkpointed_steps())
        or (metrics.exists() and metrics.stat().st_size > 0)
    )


def check_changes(
    run: RunDir, record: dict[str, Any], changes: list[Change], trains: bool = True
) -> None:
    """Refuse the changes that would alter the model or the training of ``run``; ``trains``
    False: ``run`` is of a one-shot job (export, generate, ...), which a name given again
    would overwrite rather than resume."""
    if not has_progress(run, record):
        return
    refused = [change for change in changes if not change.safe]
    if refused and not trains:
        listing = ", ".join(str(change) for change in refused)
        raise ResumeRefusedError(
            f"run name {run.name!r} is taken under {run.root}: a {record.get('status')} "
            f"{record.get('key')} run with another config ({listing}); give this one a new "
            "--name (or leave --name out for a fresh one), or add --fresh to replace it"
        )
    if refused:
        listing = ", ".join(str(change) for change in refused)
        raise ResumeRefusedError(
            f"run {run.name!r} under {run.root} was started with another config ({listing}); "
            f"resuming would change what it trains: rerun with --fresh to start it over, or "
            f"--name NEW --branch {run.name} to continue from its checkpoint as a new run"
        )


def check_checkpoints(run: RunDir, record: dict[str, Any]) -> None:
    """A run that checkpointed a step > 0 must still have a checkpoint to resume from."""
    step = int(record.get("checkpoint_step") or 0)
    if step > 0 and not run.checkpointed_steps():
        raise ResumeRefusedError(
            f"run {run.name!r} under {run.root} checkpointed step {step} but "
            f"{run.checkpoint_dir} holds no checkpoint: it will not restart from step 0 under "
            "the same name; rerun with --fresh to start it over"
        )


def check_records(run: RunDir, fresh: bool) -> None:
    """Refuse (unless ``fresh``) a run folder that holds files but lost ``job.json``, or a run
    with progress whose ``config.yaml`` is gone; before anything is written."""
    if fresh or not run.path.is_dir():
        return
    if not run.record_path.exists():
        held = sorted(entry.name for entry in run.path.iterdir())
        if held in ([], ["logs"]):  # nothing to lose, or the log another process of the
            return  # same multi-process launch opened before process 0 wrote the record
        listing = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
        rebuild = (
            f", rebuild it with `theseus rebuild-record {run.name} --root {run.root}`"
            if run.config_path.is_file()
            else ""
        )
        raise ResumeRefusedError(
            f"run {run.name!r} under {run.root} has no job.json (its record) but its folder "
            f"holds {listing}: restore {run.record_path.name} to resume it{rebuild}, or rerun "
            "with --fresh to start it over (the folder is replaced)"
        )
    if not run.config_path.exists():
        try:
            record = read_record(run.record_path)
        except JobError:
            return  # the caller names a damaged job.json itself
        if has_progress(run, record):
            raise ResumeRefusedError(
                f"run {run.name!r} under {run.root} has progress but its config.yaml is gone: "
                "its config is unknown, so it cannot be resumed; restore config.yaml, or rerun "
                "with --fresh to start it over"
            )


def history_entry(attempt: int, started: str, changes: list[Change]) -> dict[str, Any]:
    """One line of a run's history: an attempt, and the config changes it brought."""
    entry: dict[str, Any] = {"attempt": attempt, "started": started}
    if changes:
        entry["changed"] = {c.key: [c.before, c.after] for c in changes}
    return entry
