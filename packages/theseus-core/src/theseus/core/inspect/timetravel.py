"""Time travel: the exact state and batch of any checkpointed step of any run.

``step k`` means the state after k updates (checkpoint k) and the batch of index k, which
together produce the loss logged as step k.
"""

from __future__ import annotations

import logging
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from theseus.core.errors import TheseusError

log = logging.getLogger(__name__)


class InspectError(TheseusError):
    """A step, run or module that cannot be inspected."""


class Moment:
    """One run at one checkpointed step: its state, its batch, its model."""

    def __init__(self, trainer: Any, step: int, state: dict) -> None:
        self.trainer = trainer
        self.step = step
        self.state = state
        self._model: Any = None

    # ------------------------------------------------------------------ data
    def batch(self) -> dict:
        """The batch of step k, exactly as training saw it."""
        return self.trainer.data.batch(self.step)

    @property
    def model(self) -> Any:
        """The model with the checkpoint's parameters (shared, not copied)."""
        from flax import nnx

        if self._model is None:
            self._model = nnx.merge(self.trainer.graphdef, self.state["params"], self.trainer.rest)
        return self._model

    # ------------------------------------------------------------------ replay
    def replay(self) -> dict[str, Any]:
        """Recompute step k with the training step itself: loss, gradient norm and gradients."""
        import jax

        copy = jax.tree.map(lambda x: x.copy(), self.state)  # the step donates its input
        _, metrics = self.trainer.train_step(copy, self._placed(self.batch()))
        return {
            "step": self.step,
            "loss": float(metrics["loss"]),
            "grad_norm": float(metrics["grad_norm"]),
            "grads": self._gradients(),
        }

    def _placed(self, batch: dict) -> dict:
        layout = getattr(self.trainer, "layout", None)
        return layout.place_batch(batch) if layout is not None else batch

    def _gradients(self) -> Any:
        import jax
        import jax.numpy as jnp
        from theseus.core.train.step import summed_loss

        batch = self.batch()

        def mean_loss(params: Any) -> Any:
            total, (_, count, _) = summed_loss(
                self.trainer.graphdef, params, self.trainer.rest, batch
            )
            return total / jnp.maximum(count, 1.0)

        return jax.jit(jax.grad(mean_loss))(self.state["params"])

    # ------------------------------------------------------------------ modules
    def modules(self) -> dict[str, Any]:
        from theseus.core.inspect.capture import module_paths

        return module_paths(self.model)

    def module(self, path: str) -> Any:
        modules = self.modules()
        if path not in modules:
            close = get_close_matches(path, [p for p in modules if p], n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InspectError(f"no module {path!r} in run {self.trainer.run.name}{hint}")
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
                raise InspectError(
                    f"no module of type {type_name!r} in run {self.trainer.run.name}"
                )
        else:
            chosen = {p: self.module(p) for p in paths}
        batch = self.batch()
        with recording(chosen) as captures:
            self.model(
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
    from theseus.core.jobs import JobContext
    from theseus.core.plugins import registries
    from theseus.core.rundir import RunDir
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.checkpoints import abstract_of
    from theseus.core.train.trainer import Trainer

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
    base = yaml.safe_load(run_dir.config_path.read_text())
    tree = config_for(spec, regs, overrides or [], base)
    context = JobContext(root=str(root), run=run_dir, registries=regs)
    layout = "padded" if record["key"].endswith("/sft") else "packed"
    trainer = Trainer(tree.node, context, layout=layout)
    abstract = abstract_of(trainer.initial)
    state, _, _ = trainer.checkpoints.restore(step, abstract, abstract_of(trainer.rng_data))
    return Moment(trainer, step, state)
