"""The checkpoint callback: saves every ``checkpoint.every`` steps, on a signal and at the
end, and keeps the run's record of its newest finished checkpoint.

Saves run in the background (Orbax); ``job.json``'s ``checkpoint_step`` follows the saves as
they finish, so a later start that finds no checkpoint on disk is refused instead of
silently starting over (:func:`theseus.core.resume.check_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from theseus.core.rundir import RunDir
from theseus.core.train.callbacks import Callback, due
from theseus.core.train.checkpoints import Checkpoints
from theseus.core.train.state import TrainState


class Checkpointing(Callback):
    def __init__(
        self,
        checkpoints: Checkpoints,
        run: RunDir,
        *,
        every: int,
        total_steps: int,
        rng_data: Callable[[], Any],
        flush: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.checkpoints = checkpoints
        self.run = run
        self.every = every
        self.total_steps = total_steps
        self.rng_data = rng_data  # the dropout stream's key data (saved with each checkpoint)
        self.flush = flush  # records the pending metrics first (a save blocks the loop)
        self.stopping = stopping  # a signal asked the run to stop: save now
        self.last_saved: int | None = None

    def on_train_start(self, step: int, state: TrainState) -> None:
        self.last_saved = step

    def on_step(self, step: int, state: TrainState, metrics: dict) -> None:
        done = step + 1
        if due(done, self.every, self.total_steps) or self.stopping():
            self.flush()
            self.save(done, state)

    def on_loop_end(self, state: TrainState) -> None:
        final = int(state.step)
        if final != self.last_saved:
            self.save(final, state)

    def save(self, step: int, state: TrainState) -> None:
        meta = {
            "step": step,
            "run": self.run.name,
            "data_position": step,
            "total_steps": self.total_steps,
        }
        self.checkpoints.save(step, state.saved(), self.rng_data(), meta)
        self.last_saved = step
        self.record_newest()
        self.events.emit("on_checkpoint", step=step)

    def record_newest(self) -> None:
        """The newest finished checkpoint in job.json (saves finish in the background, so
        this lags the saves; it is brought up to date when the run closes)."""
        committed = self.checkpoints.committed()
        if jax.process_index() == 0 and committed:
            recorded = int(self.run.read_record().get("checkpoint_step") or 0)
            if committed[-1] != recorded:
                self.run.update_record(checkpoint_step=committed[-1])

    def close(self) -> None:
        self.checkpoints.close()
        self.record_newest()
