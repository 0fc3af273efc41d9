"""Weights in the dtype they are computed in, cast once for a decoding loop.

A trained model keeps float32 parameters and casts each matrix to its compute dtype where
it uses it (``Linear``, ``Embedding``, a mixture's experts, LoRA's adapters). A training
step reads each weight once, so the cast costs nothing there; a decoding loop reads every
weight at every token, and a float32 read is twice the bytes of a bfloat16 one. Casting
the matrices once, before the loop, gives the same products (the layers cast the same
values to the same dtype) at half the memory traffic. Vectors (norm gains, biases) are left
alone: a layer may use them in float32 (a norm's gain is).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from theseus.models.layers.embedding import Embedding
from theseus.models.layers.linear import Linear
from theseus.models.layers.moe import MoE

#: layers that cast their matrices to ``self.dtype`` wherever they use them
CAST_WHERE_USED = (Linear, Embedding, MoE)


def cast_for_compute(model: nnx.Module) -> None:
    """Cast, in place, every floating matrix of the layers that cast it anyway to the
    layer's compute dtype (call on a model merged inside a jitted function)."""
    for _, module in nnx.iter_graph(model):
        if not isinstance(module, CAST_WHERE_USED):
            continue
        dtype = jnp.dtype(module.dtype)
        for value in vars(module).values():
            if not isinstance(value, nnx.Param):
                continue
            array = value[...]
            if array.ndim >= 2 and jnp.issubdtype(array.dtype, jnp.floating):
                if array.dtype != dtype:
                    value.set_value(array.astype(dtype))
