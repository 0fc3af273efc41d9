"""The evaluation callback: validation loss (and the job's evaluations) every ``eval.every``
steps and at the end.

The validation loss is the objective on a fixed stream of validation batches. A job adds its
own evaluations (``eval.tasks``) as ``tasks(params, step, writer) -> results``; the results of one
evaluation reach the plugins together, in one ``on_eval`` event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from theseus.core.data.loader import TrainingData
from theseus.core.train.callbacks import Callback, due
from theseus.core.train.metrics import MetricsWriter
from theseus.core.train.setup import TrainSetup
from theseus.core.train.state import TrainState


class RecordWriter(Protocol):
    """Where an evaluation writes its metrics record: the run's :class:`MetricsWriter`, or
    the row one evaluation assembles (:class:`RowCollector`)."""

    def write(self, record: dict[str, Any]) -> None: ...


#: ``tasks(params, step, writer) -> results``: evaluations beside the validation loss (they
#: record their own metrics through ``writer``).
Tasks = Callable[[Any, int, RecordWriter], dict[str, Any]]


class RowCollector:
    """What the evaluations get as their metrics writer: their records join one row."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row

    def write(self, record: dict[str, Any]) -> None:
        self.row.update({k: v for k, v in record.items() if k != "step"})


class Evaluation(Callback):
    def __init__(
        self,
        setup: TrainSetup,
        data: TrainingData,
        writer: MetricsWriter,
        *,
        flush: Callable[[], None],
        tasks: Tasks | None = None,
        publish: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.setup = setup
        self.data = data
        self.writer = writer
        self.flush = flush  # records the pending metrics first (an evaluation blocks the loop)
        # where an evaluation's one row goes: the recorder joins it to the training row of
        # the same step (both describe the state after that many updates); else written alone
        self.publish = publish or writer.write
        self.tasks = tasks
        self.every = setup.config.eval.every
        self.batches = setup.config.eval.batches

    def on_step(self, step: int, state: TrainState, metrics: dict) -> None:
        done = step + 1
        if due(done, self.every, self.setup.total_steps):
            self.flush()
            self.evaluate(state, done)

    def on_train_end(self, state: TrainState, summary: dict[str, Any]) -> None:
        summary["val/loss"] = self.evaluate(state, int(state.step))

    def evaluate(self, state: TrainState, step: int) -> float:
        """Validation loss, the objective's own validation metrics (``val/rewards/accuracy``
        of a preference run) and the job's tasks at ``step``, recorded; returns the loss."""
        loss, metrics = self.validation_metrics(state)
        row: dict[str, Any] = {"step": step, "val/loss": loss, **metrics}
        params = self.setup.full_params(state)
        results = self.tasks(params, step, RowCollector(row)) if self.tasks else {}
        self.publish(row)  # the validation metrics and every task's: one row
        self.events.emit("on_eval", step=step, results={"val/loss": loss, **metrics, **results})
        return loss

    def validation_metrics(self, state: TrainState) -> tuple[float, dict[str, float]]:
        """The loss over the fixed validation batches, and each of the objective's metrics
        averaged over them, weighted like the loss (by tokens, or by pairs)."""
        total, count = 0.0, 0.0
        sums: dict[str, float] = {}
        for batch in self.data.validation_batches(self.batches):
            placed = self.setup.layout.place_batch(batch)
            loss_sum, n, metrics = self.setup.eval_step(state.params, state.frozen, placed)
            total += float(loss_sum)
            count += float(n)
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + float(value) * float(n)
        scale = 1.0 / max(count, 1.0)
        return total * scale, {f"val/{name}": value * scale for name, value in sums.items()}
