"""What a resume that changes a run's length does to its learning-rate schedule.

The schedule spans the run's length (``training.total_steps``, or the steps
``training.total_tokens`` takes), so resuming with another length would give the remaining
steps other learning rates than the ones the run was following: a cosine over 100 steps
resumed at step 100 with 150 jumps from its final lr back up. When the lr of a remaining
step would differ, ``training.schedule_on_resume`` says what happens, and one line in the
log says what it did:

* ``refuse`` (the default): stop before anything is written, naming the two lengths, the lr
  each choice gives, and the choices;
* ``continue``: the schedule keeps the length it had (``schedule.total_steps`` is set to it
  and saved with the config), so steps past its end run at its final lr;
* ``stretch``: the schedule spans the new length.

Refusing is the default because neither choice is right for every run: continuing keeps
every planned lr (extra steps anneal no further), stretching re-plans the decay (and raises
the lr of the next step). Neither is guessed. Checked only when the run has progress and
the lr of a remaining step would change (a constant schedule never asks).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from theseus.core.config import ConfigTree
from theseus.core.resume import Change, ResumeRefusedError, has_progress
from theseus.core.rundir import RunDir

SPAN_KEY = "schedule.total_steps"


class ScheduleOnResumeError(ResumeRefusedError):
    """A resume would change the lr of the run's remaining steps and no choice was made."""


def _length_key(training: Any) -> str:
    return "training.total_tokens" if training.total_tokens else "training.total_steps"


def _steps_text(start: int, end: int) -> str:
    if end - start > 1:
        return f"steps {start}-{end - 1}"
    return f"step {start}" if end > start else f"no step (it already reached step {end})"


def learning_rates(tree: ConfigTree, config: Any, span: int, start: int, end: int) -> np.ndarray:
    """The lr of steps ``start .. end - 1`` under the run's schedule spanning ``span``."""
    import jax
    import jax.numpy as jnp
    from theseus.core.optim.build import build_schedule

    schedule_config = dataclasses.replace(config.schedule, total_steps=span)
    peak = config.optimizer.learning_rate
    quiet = logging.getLogger("absl")  # optax's notes on building (the run logs them once)
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        schedule = build_schedule(tree.registries, schedule_config, peak, span)
    finally:
        quiet.setLevel(level)
    steps = jnp.arange(start, max(start, end), dtype=jnp.int32)
    return np.asarray(jax.vmap(schedule)(steps), dtype=np.float64)


@dataclass(frozen=True)
class Settled:
    """What a resume that changed the run's length does to its schedule: the line to log,
    and the change made to ``schedule.total_steps`` (None: none) to record in its history."""

    note: str
    change: Change | None = None


def settle_schedule(
    run: RunDir, record: dict[str, Any], saved: ConfigTree, requested: ConfigTree
) -> Settled | None:
    """Apply ``training.schedule_on_resume`` to ``requested`` (the resumed run's tree) when
    its length differs from ``saved``'s (None: it does not, or the run holds no progress);
    refuse it, before anything is written, when that is the choice."""
    groups = requested.schemas
    if "training" not in groups or "schedule" not in groups or not has_progress(run, record):
        return None
    before, after = saved.to_object(), requested.to_object()
    old, new = before.training.steps(), after.training.steps()
    if old == new:
        return None
    span = before.schedule.total_steps or old
    start = int(record.get("checkpoint_step") or 0)
    kept = learning_rates(requested, after, span, start, new)
    stretched = learning_rates(requested, after, new, start, new)
    name, key = after.schedule.name, _length_key(after.training)
    changed = f"run {run.name!r}: {key} changed on resume ({old} -> {new} steps)"
    remaining = _steps_text(start, new)
    if np.array_equal(kept, stretched):
        return Settled(
            f"{changed}: the {name} lr schedule gives {remaining} the same lr either way"
        )
    policy = after.training.schedule_on_resume
    lr_at = f"lr at step {start}: {kept[0]:.2e} if it continues, {stretched[0]:.2e} if stretched"
    if policy == "refuse":
        raise ScheduleOnResumeError(
            f"{changed}, which changes the lr of {remaining} under the {name} schedule over "
            f"{span} steps ({lr_at}); set training.schedule_on_resume=continue (keep {span} "
            f"steps, then its final lr) or stretch (span {new} steps)"
        )
    if policy == "continue":
        target, what = (
            span,
            (
                f"keeps the {name} lr schedule over {span} steps ({SPAN_KEY}={span}); {remaining} "
                f"run at lr {kept[0]:.2e} .. {kept[-1]:.2e}"
            ),
        )
    else:
        target, what = (
            0,
            (
                f"spans the {name} lr schedule over {new} steps; the lr at step {start} goes from "
                f"{kept[0]:.2e} to {stretched[0]:.2e}"
            ),
        )
    note = f"{changed}: training.schedule_on_resume={policy} {what}"
    current = requested.get(SPAN_KEY)
    if current == target:
        return Settled(note)
    requested.set(SPAN_KEY, target)
    return Settled(note, Change(SPAN_KEY, current, target, safe=True))
