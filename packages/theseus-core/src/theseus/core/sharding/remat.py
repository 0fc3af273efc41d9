"""Activation checkpointing around each transformer block, without touching model code.

``block``: each block keeps the outputs of its weight matmuls and recomputes the rest
(norms, activations, attention scores and softmax) in the backward pass.
``full``: each block keeps only its input and recomputes everything inside it.

A model's ``blocks`` are either a sequence of block modules (each is wrapped) or one module
holding every layer's parameters stacked, which the model runs under a scan, calling it
once per layer: wrapped once, it is then rematerialized per layer, inside the scan.
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
    """A block whose forward is recomputed in the backward pass (``nnx.remat``).

    ``rematerialized`` tells a model that scans over it to apply no checkpoint policy of its
    own around it: nested, the outer policy would decide what is kept.
    """

    rematerialized = True

    def __init__(self, inner: nnx.Module, mode: str) -> None:
        self.inner = inner
        self.mode = mode

    def __call__(self, *args: Any) -> Any:
        def forward(block: nnx.Module, *inputs: Any) -> Any:
            return block(*inputs)

        return nnx.remat(forward, policy=POLICIES[self.mode])(self.inner, *args)


def checkpoint_blocks(model: Any, mode: str) -> None:
    """Wrap the blocks of a model just merged inside the traced step (``model.blocks``)."""
    if mode not in POLICIES:
        raise ShardingError(f"sharding.remat={mode!r} is not one of none, {', '.join(POLICIES)}")
    blocks = model.blocks  # part of theseus.core.model.LanguageModel, checked at setup
    if not isinstance(blocks, nnx.List | list | tuple):  # stacked: called once per layer
        if not isinstance(blocks, Rematerialized):
            model.blocks = Rematerialized(blocks, mode)
        return
    for index in range(len(blocks)):
        if not isinstance(blocks[index], Rematerialized):
            blocks[index] = Rematerialized(blocks[index], mode)
