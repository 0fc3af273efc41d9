"""The trainer: the loop. State in, steps dispatched, callbacks told.

The loop keeps the device busy: a step's metrics are read after the next step is
dispatched, checkpoints are written asynchronously, and everything else (records, the
non-finite policy, evaluations, checkpoints, the profiler, the plugins' lifecycle hooks)
is a callback (:mod:`theseus.core.train.callbacks`) at its own cadence.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
from theseus.core import stop
from theseus.core.console import progress_console
from theseus.core.data.loader import TrainingData
from theseus.core.data.progress import DataWaitColumn
from theseus.core.errors import PreemptedError
from theseus.core.jobs import JobContext
from theseus.core.resume import check_checkpoints
from theseus.core.sharding.mesh import describe
from theseus.core.stop import caused_by_stop
from theseus.core.train.callbacks import Callback, Events
from theseus.core.train.checkpointing import Checkpointing
from theseus.core.train.checkpoints import Checkpoints, abstract_of
from theseus.core.train.data_metrics import DataMetrics
from theseus.core.train.evaluation import Evaluation, Tasks
from theseus.core.train.lifecycle import LifecycleHooks
from theseus.core.train.loggers import build_loggers
from theseus.core.train.metrics import MetricsWriter, device_peak_flops, supersede_rows
from theseus.core.train.nonfinite import NonFinitePolicy
from theseus.core.train.opening import frozen_weights, open_run, start_state
from theseus.core.train.peak import Peak
from theseus.core.train.profile import StepProfiler
from theseus.core.train.recipe import BatchSource, TrainerParts
from theseus.core.train.recorder import Recorder
from theseus.core.train.setup import TrainSetup
from theseus.core.train.state import TrainState

log = logging.getLogger(__name__)


class Trainer:
    """Runs a :class:`TrainSetup` over a run's batches: resume, loop, callbacks.

    ``data``: where the batches come from (the loader, or a recipe's own source such as
    GRPO's rollouts). ``tasks``: the job's evaluations beside the validation loss
    (``eval.tasks``). ``callbacks``: the recipe's own (:attr:`Recipe.callbacks`), after
    the trainer's; ``validation``: whether the validation loss is evaluated (it needs
    ``data`` to be the loader)."""

    def __init__(
        self,
        setup: TrainSetup,
        data: BatchSource,
        context: JobContext,
        tasks: Tasks | None = None,
        *,
        callbacks: Callable[[TrainerParts], Sequence[Callback]] | None = None,
        validation: bool = True,
    ) -> None:
        if validation and not isinstance(data, TrainingData):
            raise TypeError("the validation loss needs the loader's data (validation=False)")
        self.setup = setup
        self.config = setup.config
        self.data = data
        self.recipe_callbacks = callbacks
        self.validation = validation
        self.root = context.root
        self.run = context.run
        self.tasks = tasks
        self.rng_data = setup.data_rng()
        self.checkpoints = Checkpoints.writer(self.run.checkpoint_dir, self.config.checkpoint)
        self.preempted = False
        self.restored_from: tuple[int, Path] | None = None  # (step, folder) of a resume

    @property
    def total_steps(self) -> int:
        return self.setup.total_steps

    # ------------------------------------------------------------------ state
    def initial_state(self) -> TrainState:
        """This run's newest checkpoint, else its parent's (a branch), else step 0 from the
        run's weight source. The frozen weights are read again from the source."""
        abstract_rng = abstract_of(self.rng_data)
        restored = self.checkpoints.restore_latest(self.setup.checkpointed_abstract, abstract_rng)
        if restored is not None:
            step, saved, self.rng_data, _ = restored
            self.restored_from = (step, self.checkpoints.directory / str(step))
            log.info("resumed %s from step %d", self.run.name, step)
            return TrainState.from_saved(saved, frozen_weights(self.setup, self.root))
        record = self.run.read_record()
        if int(record.get("checkpoint_step") or 0) > 0:  # never restart silently from 0
            check_checkpoints(self.run, record)
        parent = record.get("parent")
        if parent:  # a branch continues the parent's state, step count included
            registries = self.setup.registries
            opened = open_run(
                self.root, parent, registries=registries, what="--branch", into=self.setup
            )
            log.info("starting from run %s at step %d", opened.run.name, opened.step)
            return opened.state
        return start_state(self.setup, self.root)

    # ------------------------------------------------------------------ loop
    def fit(self) -> dict[str, Any]:
        state = self.initial_state()
        start = int(state.step)
        if start >= self.total_steps and self.restored_from is not None:
            log.info("run %s is at step %d of %d: nothing to train", self.run.name, start, start)
            self.checkpoints.close()
            self.final_state = state
            return self._previous_summary(start)
        events, recorder = self._callbacks(start)
        batches = self.data.iterator(start)
        try:
            events.emit("on_train_start", step=start, state=state)
            with _preemption_guard(self), _progress(self, start) as advance:
                for step in range(start, self.total_steps):
                    try:
                        batch = self.setup.layout.place_batch(next(batches))
                    except Exception as error:  # a data wait that a signal ended: stop here
                        if self.preempted and caused_by_stop(error):
                            break
                        raise
                    events.emit("before_step", step=step)
                    state, metrics = self.setup.train_step(state, batch)
                    events.emit("on_step", step=step, state=state, metrics=metrics)
                    advance()
                    if self.preempted:
                        break
            events.emit("on_loop_end", state=state)
            if self.preempted:
                raise PreemptedError(
                    f"run {self.run.name} stopped by a signal ({stop.last_signal()}) at step "
                    f"{int(state.step)}; checkpoint saved, rerun the same command to resume"
                )
            summary = {
                "step": int(state.step),
                "train/loss": recorder.last_loss,
                "skipped": int(state.skipped),
            }
            events.emit("on_train_end", state=state, summary=summary)
            self.final_state = state
            return summary
        finally:
            events.close()

    def _callbacks(self, start: int) -> tuple[Events, Recorder]:
        """The run's callbacks, in the order each event reaches them."""
        setup, config = self.setup, self.config
        writer = self._writer(start)
        peak, peak_source = device_peak_flops(
            config.logging.peak_flops, Path(self.root) / ".theseus"
        )
        devices = len(setup.layout.mesh.devices.flat)
        log.info(
            "training %s: steps %d -> %d, %d %s devices (%s, %s), micro-steps %d, "
            "peak %.3g FLOP/s (%s); execution plan: %s",
            self.run.name,
            start,
            self.total_steps,
            devices,
            setup.layout.mesh.devices.flat[0].platform,
            describe(setup.layout.mesh),
            config.sharding.strategy,
            setup.micro_steps,
            peak,
            peak_source,
            "; ".join(setup.execution.lines()),
        )
        recorder = Recorder(
            writer,
            every=config.logging.every,
            total_steps=self.total_steps,
            tokens_per_step=setup.tokens_per_step,
            flops_per_token=setup.flops_per_token,
            peak_flops=Peak(peak, peak_source, devices),
            with_skipped=config.training.skip_nonfinite,
        )
        callbacks: list[Callback] = [
            StepProfiler(config.logging.profile_steps, self.run.path / "profile"),
            recorder,
            DataMetrics(self.data),
            NonFinitePolicy(
                self.run.name,
                skip=config.training.skip_nonfinite,
                max_skipped=config.training.max_skipped_steps,
                restored_from=self.restored_from,
            ),
        ]
        if self.validation:
            assert isinstance(self.data, TrainingData)  # checked in __init__
            callbacks.append(
                Evaluation(
                    setup,
                    self.data,
                    writer,
                    flush=recorder.flush,
                    tasks=self.tasks,
                    publish=recorder.attach,
                )
            )
        if self.recipe_callbacks is not None:
            parts = TrainerParts(setup, self.data, writer, recorder.flush)
            callbacks.extend(self.recipe_callbacks(parts))
        callbacks += [
            Checkpointing(
                self.checkpoints,
                self.run,
                every=config.checkpoint.every,
                total_steps=self.total_steps,
                rng_data=lambda: self.rng_data,
                flush=recorder.flush,
                stopping=lambda: self.preempted,
            ),
            LifecycleHooks(setup, self.run),
        ]
        return Events(callbacks), recorder

    def _writer(self, start: int) -> MetricsWriter:
        """The metrics log (and the configured loggers) of the main process."""
        main_process = jax.process_index() == 0
        loggers = []
        if main_process:
            registries = self.setup.registries
            loggers = build_loggers(registries, self.config.logging.loggers, self.run, self.config)
            supersede_rows(self.run.metrics_path, start)  # rows past the resumed step: redone
        return MetricsWriter(self.run.metrics_path, enabled=main_process, loggers=loggers)

    def _previous_summary(self, step: int) -> dict[str, Any]:
        """What the finished run reported, when it is started again with nothing to do."""
        try:
            summary = json.loads((self.run.path / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        return (
            summary if isinstance(summary, dict) and summary.get("step") == step else {"step": step}
        )


@contextmanager
def _preemption_guard(trainer: Trainer) -> Iterator[None]:
    """SIGTERM/SIGINT: finish the current step, checkpoint, stop (:func:`stop.graceful`)."""

    def preempt() -> None:
        trainer.preempted = True

    with stop.graceful(f"run {trainer.run.name} (checkpointing first)", preempt):
        yield


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
        DataWaitColumn(trainer.data),  # "waiting for <dataset>: unit k of n" while it waits
        console=progress_console(),
    ) as progress:
        task = progress.add_task("train", total=trainer.total_steps, completed=start)
        yield lambda: progress.advance(task)
