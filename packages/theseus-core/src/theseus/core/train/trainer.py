"""The trainer: state in, steps, metrics, evaluations and checkpoints out.

The loop keeps the device busy: metrics of step s are read after step s+1 is dispatched,
checkpoints are written asynchronously, and everything host-side runs beside the step.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from theseus.core.data.loader import TrainingData
from theseus.core.errors import JobError, PreemptedError, TheseusError
from theseus.core.evaluate.training import run_training_evaluations
from theseus.core.sharding.mesh import describe
from theseus.core.train.checkpoints import Checkpoints, abstract_of
from theseus.core.train.metrics import MetricsWriter, device_peak_flops, supersede_rows
from theseus.core.train.profile import StepProfiler
from theseus.core.train.setup import TrainSetup

log = logging.getLogger(__name__)


class NonFiniteLossError(TheseusError):
    """The loss became NaN or infinite."""


class Trainer:
    """Runs a :class:`TrainSetup` over a run's batches: resume, loop, evaluate, checkpoint."""

    def __init__(self, setup: TrainSetup, data: TrainingData, context: Any) -> None:
        self.setup = setup
        self.config = setup.config
        self.data = data
        self.context = context
        self.run = context.run
        self.hook = setup.registries.hook
        self.rng_data = setup.data_rng()
        ckpt = self.config.checkpoint
        self.checkpoints = Checkpoints(
            self.run.checkpoint_dir, ckpt.keep_last, ckpt.keep_every, ckpt.asynchronous
        )
        self.preempted = False
        self.restored_from: tuple[int, Path] | None = None  # (step, folder) of a resume

    @property
    def total_steps(self) -> int:
        return self.setup.total_steps

    # ------------------------------------------------------------------ state
    def initial_state(self) -> dict:
        """Resume this run's latest checkpoint, else branch/init from elsewhere, else fresh.

        Checkpoints hold everything but a LoRA run's frozen base, which is read again from
        its source (:mod:`theseus.core.train.base`)."""
        from theseus.core.train.base import frozen_base, initial_weights

        root = self.context.root
        abstract, abstract_rng = self.setup.checkpointed_abstract, abstract_of(self.rng_data)
        restored = self.checkpoints.restore_latest(abstract, abstract_rng)
        record = self.run.read_record()
        if restored is not None:
            step, state, self.rng_data, _ = restored
            self.restored_from = (step, self.checkpoints.directory / str(step))
            log.info("resumed %s from step %d", self.run.name, step)
            return {**state, "frozen": frozen_base(self.setup, root)}
        if int(record.get("checkpoint_step") or 0) > 0:  # never restart silently from 0
            from theseus.core.resume import check_checkpoints

            check_checkpoints(self.run, record)
        parent = record.get("parent")
        if parent:  # a branch continues the parent's state, step count included
            state = self._from_other_run(parent, abstract, abstract_rng)
            return {**state, "frozen": frozen_base(self.setup, root)}
        fresh = self.setup.init_state()
        if self.setup.adapted:  # new adapters on the base from init.hf, init.checkpoint, seed
            return {**fresh, "frozen": frozen_base(self.setup, root, fresh)}
        # init.checkpoint or init.hf: their weights, a new optimizer and step 0
        params = initial_weights(self.setup, root, fresh["params"])
        if self.setup.keeps_reference:  # the reference: the same initial weights, apart
            return {**fresh, "params": params, "frozen": jax.tree.map(jnp.copy, params)}
        return {**fresh, "params": params}

    def _from_other_run(self, reference: str, abstract: Any, abstract_rng: Any) -> dict:
        from theseus.core.jobs import parse_reference
        from theseus.core.rundir import RunDir

        name, at_most = parse_reference(reference, "the parent run")
        other = RunDir(self.context.root, name)
        if not other.checkpoint_dir.exists():
            raise JobError(f"run {name!r} has no checkpoints under {other.checkpoint_dir}")
        source = Checkpoints(other.checkpoint_dir, 1000, 0, False)
        steps = source.steps()
        if at_most is not None and at_most not in steps:
            raise JobError(f"run {name!r} has no checkpoint at step {at_most} (it has {steps})")
        restored = source.restore_latest(abstract, abstract_rng, at_most)
        if restored is None:
            raise JobError(f"run {name!r} has no checkpoints")
        step, state, _, _ = restored
        log.info("starting from run %s at step %d", name, step)
        return state

    # ------------------------------------------------------------------ loop
    def fit(self) -> dict[str, Any]:
        state = self.initial_state()
        start = int(state["step"])
        if start >= self.total_steps and self.restored_from is not None:
            log.info("run %s is at step %d of %d: nothing to train", self.run.name, start, start)
            self.checkpoints.close()
            self.final_state = state
            return self._previous_summary(start)
        setup = self.setup
        peak, peak_source = device_peak_flops(
            self.config.logging.peak_flops, Path(self.context.root) / ".theseus"
        )
        devices = len(setup.layout.mesh.devices.flat)
        log.info(
            "training %s: steps %d -> %d, %d devices (%s, %s), micro-steps %d, attention %s, "
            "peak %.3g FLOP/s (%s)",
            self.run.name,
            start,
            self.total_steps,
            devices,
            describe(setup.layout.mesh),
            self.config.sharding.strategy,
            setup.micro_steps,
            setup.attention,
            peak,
            peak_source,
        )
        from theseus.core.train.loggers import build_loggers

        main_process = jax.process_index() == 0
        loggers = (
            build_loggers(setup.registries, self.config.logging.loggers, self.run, self.config)
            if main_process
            else []
        )
        if main_process:  # rows past the resumed step are redone: keep each step once
            supersede_rows(self.run.metrics_path, start)
        writer = MetricsWriter(self.run.metrics_path, enabled=main_process, loggers=loggers)
        tracker = _Tracker(self, writer, peak * devices)
        profiler = StepProfiler(self.config.logging.profile_steps, self.run.path / "profile")
        batches = self.data.iterator(start)
        last_saved = start
        self.hook.theseus_on_train_start(setup=setup, run=self.run, step=start)
        try:
            with _preemption_guard(self), _progress(self, start) as advance:
                for step in range(start, self.total_steps):
                    batch = setup.layout.place_batch(next(batches))
                    profiler.before(step)
                    state, metrics = setup.train_step(state, batch)
                    profiler.after(step, metrics)
                    tracker.push(step, metrics)
                    advance()
                    done = step + 1
                    if self._due(done, self.config.eval.every):
                        tracker.flush()
                        self.evaluate(state, done, writer)
                    if self._due(done, self.config.checkpoint.every) or self.preempted:
                        tracker.flush()
                        self.save(done, state)
                        last_saved = done
                    if self.preempted:
                        break
            tracker.flush()
            if self.preempted:
                raise PreemptedError(
                    f"run {self.run.name} stopped by a signal at step {last_saved}; checkpoint saved, "
                    "rerun the same command to resume"
                )
            final = int(state["step"])
            if final != last_saved:
                self.save(final, state)
            summary = {
                "step": final,
                "train/loss": tracker.last_loss,
                "skipped": int(state["skipped"]),
            }
            summary["val/loss"] = self.evaluate(state, final, writer)
            self.final_state = state
            self.hook.theseus_on_train_end(summary=summary, run=self.run)
            return summary
        finally:
            profiler.stop()
            self.checkpoints.close()
            self._record_checkpoint_step()
            writer.close()

    def _previous_summary(self, step: int) -> dict[str, Any]:
        """What the finished run reported, when it is started again with nothing to do."""
        import json

        try:
            summary = json.loads((self.run.path / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        return (
            summary if isinstance(summary, dict) and summary.get("step") == step else {"step": step}
        )

    def _due(self, done: int, every: int) -> bool:
        return bool(every) and done % every == 0 and done < self.total_steps

    def save(self, step: int, state: dict) -> None:
        meta = {
            "step": step,
            "run": self.run.name,
            "data_position": step,
            "total_steps": self.total_steps,
        }
        saved = {k: v for k, v in state.items() if k != "frozen"}  # the base is read again
        self.checkpoints.save(step, saved, self.rng_data, meta)
        self._record_checkpoint_step()
        self.hook.theseus_on_checkpoint(step=step, run=self.run)

    def _record_checkpoint_step(self) -> None:
        """The newest finished checkpoint in job.json: a later start with none on disk is
        refused instead of starting over (saves finish in the background, so this lags)."""
        committed = self.checkpoints.committed()
        if jax.process_index() == 0 and committed:
            recorded = int(self.run.read_record().get("checkpoint_step") or 0)
            if committed[-1] != recorded:
                self.run.update_record(checkpoint_step=committed[-1])

    def evaluate(self, state: dict, step: int, writer: MetricsWriter) -> float:
        """Validation loss and ``eval.tasks`` at ``step``, recorded; returns the loss."""
        loss = self.validation_loss(state)
        writer.write({"step": step, "val/loss": loss})
        params = self.setup.full_params(state)
        results = run_training_evaluations(self, params, step, writer)
        self.hook.theseus_on_eval(step=step, results={"val/loss": loss, **results}, run=self.run)
        return loss

    def validation_loss(self, state: dict) -> float:
        total, count = 0.0, 0.0
        for batch in self.data.validation_batches(self.config.eval.batches):
            placed = self.setup.layout.place_batch(batch)
            loss_sum, n = self.setup.eval_step(state["params"], state["frozen"], placed)
            total += float(loss_sum)
            count += float(n)
        return total / max(count, 1.0)


class _Tracker:
    """Reads step metrics one step late, checks the loss, and writes records."""

    def __init__(self, trainer: Trainer, writer: MetricsWriter, peak_flops: float) -> None:
        self.trainer = trainer
        self.writer = writer
        self.peak_flops = peak_flops
        self.pending: tuple[int, dict] | None = None
        self.every = max(1, trainer.config.logging.every)
        self.started = time.perf_counter()
        self.recorded = False
        self.window_start: float | None = None  # opens at a record taken in the loop
        self.window_tokens = 0.0
        self.window_steps = 0
        self.last_loss = float("nan")

    def push(self, step: int, metrics: dict) -> None:
        previous, self.pending = self.pending, (step, metrics)
        if previous is not None:
            self._record(*previous)

    def flush(self) -> None:
        """Record the pending step now (before an evaluation, a checkpoint, the end). Its
        wait is not a throughput sample: on CPU a step may run inside its own dispatch,
        so the interval since the last record can be far shorter than a step."""
        if self.pending is not None:
            self._record(*self.pending, timed=False)
            self.pending = None

    def check_skipped(self, step: int, skipped: int) -> None:
        limit = self.trainer.config.training.max_skipped_steps
        if skipped > limit:
            raise NonFiniteLossError(
                f"run {self.trainer.run.name} skipped {skipped} steps with a non-finite loss by "
                f"step {step} (training.max_skipped_steps={limit}): the data or the learning "
                "rate needs a look"
            )

    def _nonfinite_message(self, step: int, loss: float) -> str:
        run = self.trainer.run.name
        restored = self.trainer.restored_from
        if restored is not None and step == restored[0]:  # the first step after a restore
            return (
                f"loss is {loss} at step {step} of run {run}, the first step after restoring "
                f"checkpoint {restored[0]} ({restored[1]}): that checkpoint is suspect; move "
                f"it into {restored[1].parent}.torn/ and rerun to resume from the one before"
            )
        return (
            f"loss is {loss} at step {step} of run {run}; the checkpoints saved before it are "
            "kept (set training.skip_nonfinite=true to skip such steps)"
        )

    def _record(self, step: int, metrics: dict, timed: bool = True) -> None:
        loss = float(metrics["loss"])
        if not math.isfinite(float(metrics["grad_norm"])):
            loss = float("nan") if math.isfinite(loss) else loss
        if not math.isfinite(loss) and not self.trainer.config.training.skip_nonfinite:
            raise NonFiniteLossError(self._nonfinite_message(step, loss))
        if self.trainer.config.training.skip_nonfinite:
            self.check_skipped(step, int(metrics["skipped"]))
        self.last_loss = loss
        now = time.perf_counter()
        first = not self.recorded  # compile + first step: its time is reported apart
        sample = timed and self.window_start is not None  # push to push: one loop iteration
        if sample:
            self.window_tokens += self.trainer.setup.tokens_per_step
            self.window_steps += 1
        # "step k" is the loss of the state after k updates on the batch of index k
        if sample and step % self.every and step != self.trainer.total_steps - 1:
            return
        record: dict[str, Any] = {
            "step": step,
            "train/loss": loss,
            "train/grad_norm": float(metrics["grad_norm"]),  # host values: the step is done
            "train/lr": float(metrics["learning_rate"]),
        }
        if first:
            record["perf/first_step_time"] = now - self.started
        elif sample:
            elapsed = now - self.window_start
            tokens_per_sec = self.window_tokens / elapsed
            record["perf/tokens_per_sec"] = tokens_per_sec
            record["perf/step_time"] = elapsed / self.window_steps
            record["perf/mfu"] = (
                self.trainer.setup.flops_per_token * tokens_per_sec / self.peak_flops
            )
        for name, value in metrics["model"].items():  # an objective's own: train/...
            record[name if name.startswith("train/") else f"model/{name}"] = float(value)
        record.update(self.trainer.data.step_metrics(step))  # mixture shares, data waits
        if self.trainer.config.training.skip_nonfinite:
            record["train/skipped"] = int(metrics["skipped"])
        for extra in self.trainer.hook.theseus_on_step_end(
            step=step, metrics=dict(record), setup=self.trainer.setup
        ):
            record.update(extra or {})
        self.writer.write(record)
        self.recorded = True
        self.window_start = now if timed else None
        self.window_tokens, self.window_steps = 0.0, 0


@contextmanager
def _preemption_guard(trainer: Trainer) -> Iterator[None]:
    """SIGTERM/SIGINT: finish the current step, checkpoint, stop (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        log.warning("signal %d: checkpointing and stopping", signum)
        trainer.preempted = True

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _progress(trainer: Trainer, start: int) -> Iterator[Any]:
    if not (trainer.config.logging.progress and sys.stderr.isatty()):
        yield lambda: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from theseus.core.data.progress import DataWaitColumn

    with Progress(
        TextColumn(f"[bold]{trainer.run.name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        DataWaitColumn(trainer.data),  # "waiting for <dataset>: unit k of n" while it waits
    ) as progress:
        task = progress.add_task("train", total=trainer.total_steps, completed=start)
        yield lambda: progress.advance(task)
