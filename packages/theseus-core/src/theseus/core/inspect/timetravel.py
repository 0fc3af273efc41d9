"""Time travel: the exact state and batch of any checkpointed step of any run.

``step k`` means the state after k updates (checkpoint k) and the batch of index k, which
together produce the loss logged as step k.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.errors import TheseusError
from theseus.core.inspect.capture import module_paths, recording
from theseus.core.train.opening import open_run
from theseus.core.train.recipe import Replayable
from theseus.core.train.run_tokenizer import TokenizerOnly
from theseus.core.train.state import TrainState

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.rundir import RunDir
    from theseus.core.train.setup import TrainSetup

log = logging.getLogger(__name__)


class InspectError(TheseusError):
    """A step, run or module that cannot be inspected."""


@dataclass
class Moment:
    """One run at one checkpointed step: its setup, state, batch and model."""

    setup: TrainSetup
    data: TrainingData | TokenizerOnly
    run: str
    step: int
    state: TrainState
    run_dir: RunDir | None = None
    _model: Any = field(default=None, init=False, repr=False)
    _view: Any = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------ data
    def batch(self) -> dict:
        """The loader's batch of step k, exactly as training saw it (a run whose recipe
        reads no dataset has none: see :meth:`trained_batch`)."""
        if isinstance(self.data, TokenizerOnly):
            raise InspectError(
                f"run {self.run} read no dataset: its batches were made while training"
            )
        return self.data.batch(self.step)

    def trained_batch(self) -> dict:
        """The batch step k trained on: the loader's, or where the run's recipe made its
        batches while training (GRPO's rollouts), that source's batch made again."""
        make = self.setup.recipe.batches
        if make is None:
            return self.batch()
        source = make(self.setup, self.data, self.run_dir)
        if not isinstance(source, Replayable):
            raise InspectError(
                f"run {self.run}: step {self.step} cannot be replayed: its batches were made "
                "while training and their source cannot make them again; the state, the model "
                "and its modules can still be inspected"
            )
        try:
            return source.replay_batch(self.step, self.state)
        except TheseusError as failure:
            why = f"run {self.run}: step {self.step} cannot be replayed: {failure}"
            raise InspectError(why) from failure

    @property
    def model(self) -> Any:
        """The model with the checkpoint's parameters (shared, not copied)."""
        if self._model is None:
            self._model = self.setup.model(self.setup.full_params(self.state))
        return self._model

    @property
    def view(self) -> Any:
        """The model unrolled, one block module per layer (``blocks.<i>.<name>``): what
        ``modules`` lists and ``capture`` runs. Its parameters are the checkpoint's arrays,
        except that blocks stacked over layers hold slices of them (copies)."""
        if self._view is None:
            self._view = self.model.unrolled()
        return self._view

    # ------------------------------------------------------------------ replay
    def replay(self) -> dict[str, Any]:
        """Recompute step k with the training step itself (the run's own objective): loss,
        gradient norm and gradients."""
        import jax

        batch = self.replayable_batch()
        copy = jax.tree.map(lambda x: x.copy(), self.state)  # the step donates its input
        _, metrics = self.setup.train_step(copy, self.setup.layout.place_batch(batch))
        return {
            "step": self.step,
            "loss": float(metrics["loss"]),
            "grad_norm": float(metrics["grad_norm"]),
            "grads": self._gradients(batch),
        }

    def replayable_batch(self) -> dict:
        """The batch of step k with every field the objective reads; refused in one line
        when some cannot be made again (GRPO's rollouts no checkpoint keeps)."""
        batch = self.trained_batch()
        missing = [name for name in self.setup.extra_fields if name not in batch]
        if missing:
            raise InspectError(
                f"run {self.run}: step {self.step} cannot be replayed: its batch held "
                f"{', '.join(missing)}, made while training (rollouts) and not stored; the "
                "state, the model and its modules can still be inspected"
            )
        return batch

    def _gradients(self, batch: dict) -> Any:
        import jax
        import jax.numpy as jnp

        objective = self.setup.objective

        def mean_loss(params: Any, frozen: Any) -> Any:
            total, (_, count, _) = objective(params, frozen, batch, None)
            return total / jnp.maximum(count, 1.0)

        gradient = self.setup.layout.jit(jax.grad(mean_loss))  # under the mesh: kernels per shard
        return gradient(self.state.params, self.state.frozen)

    # ------------------------------------------------------------------ modules
    def modules(self) -> dict[str, Any]:

        return module_paths(self.view)

    def module(self, path: str) -> Any:
        modules = self.modules()
        if path not in modules:
            close = get_close_matches(path, [p for p in modules if p], n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InspectError(f"no module {path!r} in run {self.run}{hint}")
        return modules[path]

    def capture(
        self, paths: list[str] | None = None, type_name: str | None = None
    ) -> dict[str, Any]:
        """Inputs and outputs of the named modules (or all of one type) on the step's batch."""

        if paths is None and type_name is None:
            chosen = {p: m for p, m in self.modules().items() if p}
        elif type_name is not None:
            chosen = {
                p: m for p, m in self.modules().items() if p and type(m).__name__ == type_name
            }
            if not chosen:
                raise InspectError(f"no module of type {type_name!r} in run {self.run}")
        else:
            chosen = {p: self.module(p) for p in paths or []}
        batch = self.trained_batch()
        with recording(chosen) as captures:
            self.view(
                batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
            )
        return captures


def open_step(root: str | Path, run: str, step: int, overrides: list[str] | None = None) -> Moment:
    """Restore run ``run`` at checkpoint ``step`` (with config overrides, e.g. a new mesh),
    and open its batches. Reads only: a damaged ``job.json``, ``config.yaml`` or checkpoint
    is an error naming the file, and nothing in the run directory is written."""
    opened = open_run(root, f"{run}@{step}", error=InspectError, overrides=overrides or ())
    return Moment(opened.setup, opened.data(), run, step, opened.state, opened.run)
