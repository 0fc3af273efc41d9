"""How a setup builds its model: one class (adapters added for a LoRA run), one config, one
key, built with an execution plan or without one (the probe the plan is decided from)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from theseus.core.adapters import cast_frozen, split_trainable
from theseus.core.execution import ExecutionPlan
from theseus.core.model import check_model
from theseus.core.train.state import TrainState, split_params
from theseus.core.train.weights import FrozenRole


@dataclass(frozen=True)
class ModelBuilder:
    model_class: type
    config: Any  # the model config the run uses (the data's vocabulary filled in)
    seed: int
    adapted: bool  # LoRA: only the adapters train, on a frozen base

    def build(self, execution: ExecutionPlan | None = None) -> Any:
        key = jax.random.fold_in(jax.random.key(self.seed), 0)
        return self.model_class(self.config, rngs=nnx.Rngs(params=key), execution=execution)

    def probe(self, seq_len: int, name: str, execution: ExecutionPlan) -> tuple[Any, float]:
        """The model built in the plan as decided so far (its compute dtype), abstract
        (nothing allocated), to be asked what it can run; and its training FLOPs per token
        (counted on the traced model)."""
        counted: dict[str, float] = {}

        def build_and_count() -> Any:
            model = self.build(execution)
            counted["flops"] = float(model.flops_per_token(seq_len))
            return model

        model = nnx.eval_shape(build_and_count)
        check_model(model, name)
        return model, counted["flops"]

    def graphdef(self, execution: ExecutionPlan) -> nnx.GraphDef:
        """The model's graph definition under ``execution`` (a static part of it)."""
        return split_params(nnx.eval_shape(lambda: self.build(execution)))[0]

    def rest(self, probe: Any) -> Any:
        """The model's non-parameter state (adapters' layer indices), made for real."""
        rest = split_params(probe)[2]
        if jax.tree.leaves(rest):
            rest = jax.jit(lambda: split_params(self.build())[2])()
        return rest

    def fresh_state(
        self, optimizer: optax.GradientTransformation, frozen: FrozenRole, base_dtype: str
    ) -> Callable[[], TrainState]:
        """``make_state() -> TrainState``: the seeded parameters, the optimizer's state, and
        the frozen weights ``frozen`` names (a LoRA base, or a DPO reference copy)."""

        def make_state() -> TrainState:
            _, params, _ = split_params(self.build())
            # strongly typed, as every later step's outputs are: a weak-typed leaf (a gain made
            # from a Python float) would make the first step compile a program of its own
            params = jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype), params)
            trainable, base = split_trainable(params, self.adapted)
            if frozen == "reference":
                base = jax.tree.map(jnp.copy, params)
            return TrainState.fresh(trainable, optimizer, cast_frozen(base, base_dtype))

        return make_state
