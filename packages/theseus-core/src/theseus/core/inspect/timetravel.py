"""Time travel: the exact state and batch of any checkpointed step of any run.

``step k`` means the state after k updates (checkpoint k) and the batch of index k, which
together produce the loss logged as step k.
"""

from __future__ import annotations

import logging
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from theseus.core.errors import TheseusError

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.train.setup import TrainSetup

log = logging.getLogger(__name__)


class InspectError(TheseusError):
    """A step, run or module that cannot be inspected."""


class Moment:
    """One run at one checkpointed step: its setup, state, batch and model."""

    def __init__(
        self, setup: TrainSetup, data: TrainingData, run: str, step: int, state: dict
    ) -> None:
        self.setup = setup
        self.data = data
        self.run = run
        self.step = step
        self.state = state
        self._model: Any = None
        self._view: Any = None

    # ------------------------------------------------------------------ data
    def batch(self) -> dict:
        """The batch of step k, exactly as training saw it."""
        return self.data.batch(self.step)

    @property
    def model(self) -> Any:
        """The model with the checkpoint's parameters (shared, not copied)."""
        if self._model is None:
            self._model = self.setup.model(self.state["params"])
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
        """Recompute step k with the training step itself: loss, gradient norm and gradients."""
        import jax

        copy = jax.tree.map(lambda x: x.copy(), self.state)  # the step donates its input
        _, metrics = self.setup.train_step(copy, self.setup.layout.place_batch(self.batch()))
        return {
            "step": self.step,
            "loss": float(metrics["loss"]),
            "grad_norm": float(metrics["grad_norm"]),
            "grads": self._gradients(),
        }

    def _gradients(self) -> Any:
        import jax
        import jax.numpy as jnp
        from theseus.core.train.step import summed_loss

        batch = self.batch()

        def mean_loss(params: Any) -> Any:
            total, (_, count, _) = summed_loss(self.setup.graphdef, params, self.setup.rest, batch)
            return total / jnp.maximum(count, 1.0)

        return jax.jit(jax.grad(mean_loss))(self.state["params"])

    # ------------------------------------------------------------------ modules
    def modules(self) -> dict[str, Any]:
        from theseus.core.inspect.capture import module_paths

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
        from theseus.core.inspect.capture import recording

        if paths is None and type_name is None:
            chosen = {p: m for p, m in self.modules().items() if p}
        elif type_name is not None:
            chosen = {
                p: m for p, m in self.modules().items() if p and type(m).__name__ == type_name
            }
            if not chosen:
                raise InspectError(f"no module of type {type_name!r} in run {self.run}")
        else:
            chosen = {p: self.module(p) for p in paths}
        batch = self.batch()
        with recording(chosen) as captures:
            self.view(
                batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
            )
        return captures


def checkpointed_steps(run_path: Path) -> list[int]:
    directory = run_path / "checkpoints"
    if not directory.exists():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def open_step(root: str | Path, run: str, step: int, overrides: list[str] | None = None) -> Moment:
    """Restore run ``run`` at checkpoint ``step`` (with config overrides, e.g. a new mesh)."""
    from theseus.core.plugins import registries
    from theseus.core.rundir import RunDir
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.checkpoints import Checkpoints, abstract_of
    from theseus.core.train.setup import TrainSetup, open_data

    run_dir = RunDir(root, run)
    record = run_dir.read_record()
    steps = checkpointed_steps(run_dir.path)
    if step not in steps:
        nearest = sorted(steps, key=lambda s: (abs(s - step), s))[:2]
        listing = ", ".join(str(s) for s in sorted(nearest)) or "none"
        raise InspectError(
            f"run {run!r} has no checkpoint at step {step}; nearest checkpointed steps: {listing}"
        )
    regs = registries()
    spec = job_spec(record["key"], regs)
    job_class = spec.load()
    base = yaml.safe_load(run_dir.config_path.read_text())
    config = config_for(spec, regs, overrides or [], base).to_object(job_class.config_type)
    data = open_data(config, str(root), job_class.layout)
    setup = TrainSetup.build(config, regs, data.vocab_size)
    checkpoints = Checkpoints(run_dir.checkpoint_dir, 1000, 0, False)
    try:
        state, _, _ = checkpoints.restore(step, setup.abstract_state, abstract_of(setup.data_rng()))
    finally:
        checkpoints.close()
    return Moment(setup, data, run, step, state)
