"""Trainer callbacks: everything the loop does besides stepping, each at its own cadence.

The loop (:meth:`theseus.core.train.trainer.Trainer.fit`) dispatches a step and tells the
callbacks; they read metrics, evaluate, checkpoint, profile and call the plugins' lifecycle
hooks. Events, in the order a run sees them::

    on_train_start(step, state)           before the first step (``step``: where it starts)
    before_step(step) / on_step(step, state, metrics)       around each dispatched step
    on_values(step, values)               a step's host values (read one step late)
    on_record(step, record) -> extras     a metrics record is about to be written
    on_eval(step, results)                an evaluation finished
    on_checkpoint(step)                   a checkpoint was saved
    on_loop_end(state)                    the loop stopped (at the end, or on a signal)
    on_train_end(state, summary)          the run finished (not on a failure or a signal)
    close()                               always, last

A callback overrides the events it needs. It may emit events for the others through
``self.events`` (set when the list is built): the evaluation callback emits ``on_eval``,
the recorder ``on_values`` and ``on_record``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Callback:
    """Does nothing at every event; subclasses override what they need."""

    events: Events

    def on_train_start(self, step: int, state: Any) -> None:
        pass

    def before_step(self, step: int) -> None:
        pass

    def on_step(self, step: int, state: Any, metrics: dict) -> None:
        pass

    def on_values(self, step: int, values: dict[str, float]) -> None:
        pass

    def on_record(self, step: int, record: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def on_eval(self, step: int, results: dict[str, Any]) -> None:
        pass

    def on_checkpoint(self, step: int) -> None:
        pass

    def on_loop_end(self, state: Any) -> None:
        pass

    def on_train_end(self, state: Any, summary: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class Events:
    """The callbacks of a run, called in order for each event."""

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)
        for callback in self.callbacks:
            callback.events = self

    def emit(self, event: str, **arguments: Any) -> list[Any]:
        """Call ``event`` on every callback, in order; their answers."""
        return [getattr(callback, event)(**arguments) for callback in self.callbacks]

    def close(self) -> None:
        """Close every callback, even when one of them fails (the first failure is raised
        once all have closed)."""
        failure: BaseException | None = None
        for callback in self.callbacks:
            try:
                callback.close()
            except BaseException as error:  # noqa: BLE001 - re-raised below
                failure = failure or error
        if failure is not None:
            raise failure


def due(done: int, every: int, total: int) -> bool:
    """Whether a cadence of ``every`` steps falls after ``done`` steps, before the end (the
    end has its own save and evaluation)."""
    return bool(every) and done % every == 0 and done < total
