"""The metrics callback: reads each step's metrics one step late and writes its record.

Reading a step's values waits for that step only, and by the time step s is read step s+1
is already dispatched, so the device never idles for the host. Records carry the loss, the
gradient norm, the learning rate, the model's own metrics and, between two records taken in
the loop, the throughput and the MFU of those steps.
"""

from __future__ import annotations

import math
import time
from typing import Any

from theseus.core.train.callbacks import Callback
from theseus.core.train.metrics import MetricsWriter
from theseus.core.train.peak import Peak


class Recorder(Callback):
    """``logging.every``: one record per that many steps (and the first and last)."""

    def __init__(
        self,
        writer: MetricsWriter,
        *,
        every: int,
        total_steps: int,
        tokens_per_step: int,
        flops_per_token: float,
        peak_flops: Peak,
        with_skipped: bool,
    ) -> None:
        self.writer = writer
        self.every = max(1, every)
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.with_skipped = with_skipped
        self.pending: tuple[int, dict] | None = None
        self.started = time.perf_counter()
        self.recorded = False
        self.window_start: float | None = None  # opens at a record taken in the loop
        self.window_tokens = 0.0
        self.window_steps = 0
        self.last_loss = float("nan")
        self.attached: dict[int, dict[str, Any]] = {}  # step -> an evaluation's row
        self.looping = True

    def attach(self, row: dict[str, Any]) -> None:
        """An evaluation's row of step k: written with the training row of step k (the loss
        of the same state, after k updates), or alone when no such row comes (that step is
        not logged, or the loop is over)."""
        step = row["step"]
        if not self.looping or step >= self.total_steps:
            self.writer.write(row)
        else:
            self.attached.setdefault(step, {}).update(row)

    def on_step(self, step: int, state: Any, metrics: dict) -> None:
        previous, self.pending = self.pending, (step, metrics)
        if previous is not None:
            self._record(*previous)

    def on_loop_end(self, state: Any) -> None:
        self.flush()
        self.looping = False
        for step in sorted(self.attached):  # a stop before their step's training row
            self.writer.write(self.attached[step])
        self.attached.clear()

    def close(self) -> None:
        self.writer.close()

    def flush(self) -> None:
        """Record the pending step now (before an evaluation, a checkpoint, the end). Its
        wait is not a throughput sample: on CPU a step may run inside its own dispatch,
        so the interval since the last record can be far shorter than a step."""
        if self.pending is not None:
            self._record(*self.pending, timed=False)
            self.pending = None

    def _record(self, step: int, metrics: dict, timed: bool = True) -> None:
        loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
        if not math.isfinite(grad_norm) and math.isfinite(loss):
            loss = float("nan")  # a step whose gradients are not finite did not train
        values = {
            "loss": loss,
            "grad_norm": grad_norm,
            "learning_rate": float(metrics["learning_rate"]),
            "skipped": int(metrics["skipped"]),
        }
        self.events.emit("on_values", step=step, values=values)  # the non-finite policy
        self.last_loss = values["loss"]
        now = time.perf_counter()
        first = not self.recorded  # compile + first step: its time is reported apart
        sample = timed and self.window_start is not None  # push to push: one loop iteration
        if sample:
            self.window_tokens += self.tokens_per_step
            self.window_steps += 1
        # "step k" is the loss of the state after k updates on the batch of index k
        evaluated = self.attached.pop(step, None)
        if sample and step % self.every and step != self.total_steps - 1:
            if evaluated:
                self.writer.write(evaluated)
            return
        record: dict[str, Any] = {
            "step": step,
            "train/loss": values["loss"],
            "train/grad_norm": values["grad_norm"],  # host values: the step is done
            "train/lr": values["learning_rate"],
        }
        if first:
            record["perf/first_step_time"] = now - self.started
        elif sample and self.window_start is not None:
            elapsed = now - self.window_start
            tokens_per_sec = self.window_tokens / elapsed
            record["perf/tokens_per_sec"] = tokens_per_sec
            record["perf/step_time"] = elapsed / self.window_steps
            # at most 1: the peak is raised to any rate the run reaches (train/peak.py)
            record["perf/mfu"] = self.peak_flops.mfu(self.flops_per_token * tokens_per_sec)
        for name, value in metrics["model"].items():  # an objective's own: train/...
            record[name if name.startswith("train/") else f"model/{name}"] = float(value)
        if self.with_skipped:
            record["train/skipped"] = values["skipped"]
        for extra in self.events.emit("on_record", step=step, record=dict(record)):
            record.update(extra or {})
        record.update(evaluated or {})
        self.writer.write(record)
        self.recorded = True
        self.window_start = now if timed else None
        self.window_tokens, self.window_steps = 0.0, 0
