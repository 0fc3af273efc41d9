"""The plugins' training lifecycle hooks (``theseus_on_*``) as one callback."""

from __future__ import annotations

from typing import Any

from theseus.core.rundir import RunDir
from theseus.core.train.callbacks import Callback
from theseus.core.train.setup import TrainSetup


class LifecycleHooks(Callback):
    """Calls the hooks of :mod:`theseus.core.hookspecs` at the matching events."""

    def __init__(self, setup: TrainSetup, run: RunDir) -> None:
        self.setup = setup
        self.run = run
        self.hook = setup.registries.hook

    def on_train_start(self, step: int, state: Any) -> None:
        self.hook.theseus_on_train_start(setup=self.setup, run=self.run, step=step)

    def on_record(self, step: int, record: dict[str, Any]) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        for extra in self.hook.theseus_on_step_end(step=step, metrics=record, setup=self.setup):
            extras.update(extra or {})
        return extras

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        self.hook.theseus_on_eval(step=step, results=results, run=self.run)

    def on_checkpoint(self, step: int) -> None:
        self.hook.theseus_on_checkpoint(step=step, run=self.run)

    def on_train_end(self, state: Any, summary: dict[str, Any]) -> None:
        self.hook.theseus_on_train_end(summary=summary, run=self.run)
