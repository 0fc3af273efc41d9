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
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.errors import ConfigError, JobError, PreemptedError, TheseusError
from theseus.core.evaluate.training import run_training_evaluations
from theseus.core.optim.build import build_optimizer
from theseus.core.sharding.config import check_remat
from theseus.core.sharding.mesh import describe
from theseus.core.sharding.placement import Layout
from theseus.core.train.build import build_model
from theseus.core.train.checkpoints import Checkpoints, abstract_of
from theseus.core.train.metrics import MetricsWriter, device_peak_flops
from theseus.core.train.step import make_eval_step, make_train_step

log = logging.getLogger(__name__)


class NonFiniteLossError(TheseusError):
    """The loss became NaN or infinite."""


def plan_batches(training: Any, devices: int) -> tuple[int, int]:
    """(per-device micro-batch, micro-steps) from the global and per-device batch sizes."""
    global_batch = int(training.global_batch_size)
    per_device = int(training.per_device_batch_size) or global_batch // max(devices, 1)
    per_step = per_device * devices
    if per_device <= 0 or global_batch % per_step:
        raise ConfigError(
            f"training.global_batch_size={global_batch} is not a multiple of "
            f"training.per_device_batch_size={per_device} x {devices} devices = {per_step}"
        )
    return per_device, global_batch // per_step


def total_steps(training: Any) -> int:
    if training.total_tokens:
        tokens_per_step = int(training.global_batch_size) * int(training.seq_len)
        return max(1, math.ceil(int(training.total_tokens) / tokens_per_step))
    return int(training.total_steps)


class Trainer:
    def __init__(self, config: Any, context: Any, layout: str = "packed") -> None:
        from theseus.core.data.api import open_training_data

        self.config = config
        self.context = context
        self.registries = context.registries
        self.run = context.run
        training = config.training
        self.total_steps = total_steps(training)
        self.devices = jax.devices()
        self.layout = Layout(config.sharding)
        self.per_device, self.micro_steps = plan_batches(training, self.layout.batch_shards)
        self.data = open_training_data(
            context.root,
            config.data,
            seq_len=int(training.seq_len),
            global_batch_size=int(training.global_batch_size),
            seed=int(training.seed),
            layout=layout,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )
        root_key = jax.random.key(int(training.seed))
        self.rng_data = self.layout.replicate(
            jax.random.key_data(jax.random.fold_in(root_key, 2))  # dropout stream
        )
        self.optimizer = build_optimizer(
            self.registries, config.optimizer, config.schedule, self.total_steps
        )
        from theseus.core.optim.build import build_schedule

        self.schedule = build_schedule(
            self.registries, config.schedule, config.optimizer.learning_rate, self.total_steps
        )

        def build() -> Any:
            return build_model(
                self.registries,
                config.model,
                self.data.vocab_size,
                int(training.seq_len),
                jax.random.fold_in(root_key, 0),
                config.precision.compute_dtype,
            )

        # The state is created by a jitted init straight into its shardings (no device
        # ever holds more than its shards); the graph and FLOPs come from the abstract model.
        counted: dict[str, float] = {}

        def build_and_count() -> Any:
            model = build()
            counted["flops"] = float(model.flops_per_token(int(training.seq_len)))
            return model

        abstract_model = nnx.eval_shape(build_and_count)
        self.flops_per_token = counted["flops"]
        self.graphdef, _, self.rest = nnx.split(abstract_model, nnx.Param, ...)
        if jax.tree.leaves(self.rest):  # non-parameter state (none in the shipped models)
            self.rest = nnx.split(build(), nnx.Param, ...)[2]
        self.initial = self.layout.init_state(lambda: self._fresh_state(build()))
        step_fn = make_train_step(
            self.graphdef,
            self.rest,
            self.optimizer,
            self.schedule,
            self.micro_steps,
            bool(training.skip_nonfinite),
            micro_sharding=self.layout.micro_sharding(),
            grad_shardings=self.layout.grad_shardings(self.initial),
            remat=check_remat(config.sharding),
        )
        self.state_shardings = self.layout.state_shardings(self.initial)
        self.train_step = self.layout.jit_step(step_fn, self.state_shardings)
        self.eval_step = jax.jit(
            make_eval_step(self.graphdef, self.rest),
            in_shardings=(self.state_shardings["params"], self.layout.batch_sharding),
            out_shardings=self.layout.replicated,
        )
        ckpt = config.checkpoint
        self.checkpoints = Checkpoints(
            self.run.checkpoint_dir, ckpt.keep_last, ckpt.keep_every, ckpt.asynchronous
        )
        self.preempted = False

    # ------------------------------------------------------------------ state
    def _fresh_state(self, model: Any) -> dict:
        _, params, _ = nnx.split(model, nnx.Param, ...)
        return {
            "params": params,
            "opt_state": self.optimizer.init(params),
            "step": jnp.zeros((), jnp.int32),
            "skipped": jnp.zeros((), jnp.int32),
        }

    def initial_state(self) -> dict:
        """Resume this run's latest checkpoint, else branch/init from elsewhere, else fresh."""
        abstract = abstract_of(self.initial)
        abstract_rng = abstract_of(self.rng_data)
        restored = self.checkpoints.restore_latest(abstract, abstract_rng)
        if restored is not None:
            step, state, self.rng_data, _ = restored
            log.info("resumed %s from step %d", self.run.name, step)
            return state
        parent = self.run.read_record().get("parent")
        if parent:  # a branch continues the parent's state, step count included
            return self._from_other_run(parent, abstract, abstract_rng)
        if self.config.init.checkpoint:  # weights only, a new optimizer and step 0
            state = self._from_other_run(self.config.init.checkpoint, abstract, abstract_rng)
            return {**self.initial, "params": state["params"]}
        if self.config.init.hf:  # Hugging Face weights, a new optimizer and step 0
            from theseus.core.train.hf_init import params_from_hf

            return {
                **self.initial,
                "params": params_from_hf(self.config.init.hf, self.initial["params"]),
            }
        return self.initial

    def _from_other_run(self, reference: str, abstract: Any, abstract_rng: Any) -> dict:
        from theseus.core.rundir import RunDir

        name, _, step_text = reference.partition("@")
        other = RunDir(self.context.root, name)
        if not other.checkpoint_dir.exists():
            raise JobError(f"run {name!r} has no checkpoints under {other.checkpoint_dir}")
        at_most = int(step_text) if step_text else None
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
        peak, peak_source = device_peak_flops(float(self.config.logging.peak_flops))
        log.info(
            "training %s: steps %d -> %d, %d devices (%s, %s), micro-steps %d, peak %.3g FLOP/s (%s)",
            self.run.name,
            start,
            self.total_steps,
            len(self.devices),
            describe(self.layout.mesh),
            self.config.sharding.strategy,
            self.micro_steps,
            peak,
            peak_source,
        )
        from theseus.core.train.loggers import build_loggers

        main_process = jax.process_index() == 0
        loggers = (
            build_loggers(self.registries, list(self.config.logging.loggers), self.run)
            if main_process
            else []
        )
        writer = MetricsWriter(self.run.metrics_path, enabled=main_process, loggers=loggers)
        tracker = _Tracker(self, writer, peak * len(self.devices))
        batches = self.data.iterator(start)
        last_saved = start
        try:
            with _preemption_guard(self), _progress(self, start) as advance:
                for step in range(start, self.total_steps):
                    batch = self.layout.place_batch(next(batches))
                    state, metrics = self.train_step(state, batch)
                    tracker.push(step, metrics)
                    advance()
                    done = step + 1
                    if self._due(done, self.config.eval.every):
                        tracker.flush()
                        writer.write(
                            {"step": done, "val/loss": self.validation_loss(state["params"])}
                        )
                        run_training_evaluations(self, state["params"], done, writer)
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
            summary["val/loss"] = self.validation_loss(state["params"])
            writer.write({"step": final, "val/loss": summary["val/loss"]})
            run_training_evaluations(self, state["params"], final, writer)
            self.final_state = state
            return summary
        finally:
            self.checkpoints.close()
            writer.close()

    def _due(self, done: int, every: int) -> bool:
        return bool(every) and done % every == 0 and done < self.total_steps

    def save(self, step: int, state: dict) -> None:
        meta = {
            "step": step,
            "run": self.run.name,
            "data_position": step,
            "total_steps": self.total_steps,
        }
        self.checkpoints.save(step, state, self.rng_data, meta)

    def validation_loss(self, params: Any) -> float:
        total, count = 0.0, 0.0
        for batch in self.data.validation_batches(int(self.config.eval.batches)):
            loss_sum, n = self.eval_step(params, self.layout.place_batch(batch))
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
        self.every = max(1, int(trainer.config.logging.every))
        self.window_start = time.perf_counter()
        self.window_tokens = 0.0
        self.window_steps = 0
        self.last_loss = float("nan")

    def push(self, step: int, metrics: dict) -> None:
        previous, self.pending = self.pending, (step, metrics)
        if previous is not None:
            self._record(*previous)

    def flush(self) -> None:
        if self.pending is not None:
            self._record(*self.pending)
            self.pending = None

    def _record(self, step: int, metrics: dict) -> None:
        loss = float(metrics["loss"])
        if not math.isfinite(float(metrics["grad_norm"])):
            loss = float("nan") if math.isfinite(loss) else loss
        self.window_tokens += float(self.trainer.config.training.global_batch_size) * float(
            self.trainer.config.training.seq_len
        )
        self.window_steps += 1
        if not math.isfinite(loss) and not self.trainer.config.training.skip_nonfinite:
            raise NonFiniteLossError(
                f"loss is {loss} at step {step} of run {self.trainer.run.name}; the last good "
                "checkpoint is kept (set training.skip_nonfinite=true to skip such steps)"
            )
        self.last_loss = loss
        # "step k" is the loss of the state after k updates on the batch of index k
        if step % self.every and step != self.trainer.total_steps - 1:
            return
        elapsed = time.perf_counter() - self.window_start
        tokens_per_sec = self.window_tokens / elapsed if elapsed > 0 else 0.0
        record = {
            "step": step,
            "train/loss": loss,
            "train/grad_norm": metrics["grad_norm"],
            "train/lr": metrics["learning_rate"],
            "perf/tokens_per_sec": tokens_per_sec,
            "perf/step_time": elapsed / max(self.window_steps, 1),
            "perf/mfu": self.trainer.flops_per_token * tokens_per_sec / self.peak_flops,
        }
        if self.trainer.config.training.skip_nonfinite:
            record["train/skipped"] = metrics.get("skipped", 0)
        self.writer.write(record)
        self.window_start, self.window_tokens, self.window_steps = time.perf_counter(), 0.0, 0


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

    with Progress(
        TextColumn(f"[bold]{trainer.run.name}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
    ) as progress:
        task = progress.add_task("train", total=trainer.total_steps, completed=start)
        yield lambda: progress.advance(task)
