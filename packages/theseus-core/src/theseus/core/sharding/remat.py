"""Activation checkpointing around each transformer block, without touching model code.

``block``: each block keeps the outputs of its weight matmuls and recomputes the rest
(norms, activations, attention scores and softmax) in the backward pass.
``full``: each block keeps only its input and recomputes everything inside it.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from theseus.core.sharding.config import ShardingError

POLICIES = {
    "block": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}


class Rematerialized(nnx.Module):
    """A block whose forward is recomputed in the backward pass (``nnx.remat``)."""

    def __init__(self, inner: nnx.Module, mode: str) -> None:
        self.inner = inner
        self.mode = mode

    def __call__(self, *args: Any) -> Any:
        def forward(block: nnx.Module, *inputs: Any) -> Any:
            return block(*inputs)

        return nnx.remat(forward, policy=POLICIES[self.mode])(self.inner, *args)


def checkpoint_blocks(model: Any, mode: str) -> None:
    """Wrap every block of a model just merged inside the traced step (``model.blocks``)."""
    if mode not in POLICIES:
        raise ShardingError(f"sharding.remat={mode!r} is not one of none, {', '.join(POLICIES)}")
    blocks = model.blocks  # part of theseus.core.model.LanguageModel, checked at setup
    for index in range(len(blocks)):
        if not isinstance(blocks[index], Rematerialized):
            blocks[index] = Rematerialized(blocks[index], mode)
