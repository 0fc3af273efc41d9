"""The train state: one typed pytree that the step carries, the layout shards and a
checkpoint holds (all but its frozen part).

``params`` are the trained parameters: every parameter of a model, or only the adapters of
a LoRA run. ``frozen`` are parameters that ride along untouched: a LoRA run's base, or the
reference copy a DPO run compares against; they are never saved, because they are read
again from where they came from (:mod:`theseus.core.train.weights`). ``step`` counts the
updates made; ``skipped`` the steps skipped for a non-finite loss.

A checkpoint stores :meth:`TrainState.saved`, a mapping whose keys are the on-disk names
(so checkpoints written before this class existed restore unchanged).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

if TYPE_CHECKING:
    from theseus.core.sharding.placement import Layout

#: The checkpoint's names for the saved fields, in the order they are written.
SAVED_FIELDS = ("params", "opt_state", "step", "skipped")


@struct.dataclass
class TrainState:
    params: Any
    opt_state: Any
    step: Any
    skipped: Any
    frozen: Any = struct.field(default_factory=lambda: nnx.State({}))

    @classmethod
    def fresh(cls, params: Any, optimizer: Any, frozen: Any = None) -> TrainState:
        """Step 0: ``params`` with a new optimizer state (jit it into its shardings)."""
        zero = jnp.zeros((), jnp.int32)
        frozen = nnx.State({}) if frozen is None else frozen
        return cls(params, optimizer.init(params), zero, zero, frozen)

    def saved(self) -> dict[str, Any]:
        """What a checkpoint holds: everything but the frozen weights."""
        return {name: getattr(self, name) for name in SAVED_FIELDS}

    @classmethod
    def from_saved(cls, saved: dict[str, Any], frozen: Any = None) -> TrainState:
        """A state from a checkpoint's mapping and the frozen weights read again."""
        frozen = nnx.State({}) if frozen is None else frozen
        return cls(**{name: saved[name] for name in SAVED_FIELDS}, frozen=frozen)

    def with_frozen(self, frozen: Any) -> TrainState:
        return dataclasses.replace(self, frozen=frozen)

    @property
    def parameters(self) -> tuple[Any, Any]:
        """``(params, frozen)``: every parameter array the state holds."""
        return self.params, self.frozen

    def shardings(self, layout: Layout) -> TrainState:
        """Where each part of a state shaped like this one lies on ``layout``'s mesh:
        parameters (trained and frozen) by the parameter rules, the optimizer state by the
        optimizer rules (ZeRO-1 splits it where the parameters are whole), counters
        replicated. Refuses shapes the mesh cannot divide, naming the parameter."""
        return TrainState(
            params=layout.param_shardings(self.params),
            opt_state=layout.optimizer_shardings(self.opt_state),
            step=layout.replicated,
            skipped=layout.replicated,
            frozen=layout.param_shardings(self.frozen),
        )

    def abstract(self, shardings: TrainState) -> TrainState:
        """ShapeDtypeStructs of this (abstract) state carrying ``shardings``."""
        return jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), self, shardings
        )


def split_params(model: Any) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """``(graph definition, parameters, every other variable)`` of ``model``."""
    graphdef, params, *others = nnx.split(model, nnx.Param, ...)
    (rest,) = others
    return graphdef, params, rest
