"""Token (and learned position) embeddings; ``attend`` is the tied output head."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.models.layers.linear import param
from theseus.models.layers.mesh_axes import axis_size


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def float32_logits(x: jax.Array, table_VxD: jax.Array, spec: str) -> jax.Array:
    """``einsum(spec, x, table)`` accumulated and returned in float32, differentiated in x's dtype.

    The loss wants float32 logits; left to autodiff, their float32 cotangent would turn both
    backward matmuls (the largest of a small model's step) into float32 ones, measured on an
    H200 at 17% of a GPT-124M step. Here the cotangent is cast to the compute dtype first, as
    every other layer's is; in float32 nothing changes.
    """
    return jnp.einsum(spec, x, table_VxD, preferred_element_type=jnp.float32)


def _logits_forward(x, table_VxD, spec):
    return float32_logits(x, table_VxD, spec), (x, table_VxD)


def _logits_backward(spec, saved, g):
    x, table_VxD = saved
    inputs, output = spec.split("->")
    x_axes, table_axes = inputs.split(",")
    g = g.astype(x.dtype)
    f32 = jnp.float32
    dx = jnp.einsum(f"{output},{table_axes}->{x_axes}", g, table_VxD, preferred_element_type=f32)
    dtable = jnp.einsum(f"{output},{x_axes}->{table_axes}", g, x, preferred_element_type=f32)
    return dx.astype(x.dtype), dtable.astype(table_VxD.dtype)


float32_logits.defvjp(_logits_forward, _logits_backward)


class Embedding(nnx.Module):
    def __init__(
        self,
        num: int,
        dim: int,
        *,
        axes: tuple[str, str] = ("vocab", "embed"),
        std: float = 0.02,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.embedding = param(std * jax.random.normal(rngs.params(), (num, dim)), axes)
        self.dtype = dtype

    def __call__(self, ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], ids, axis=0).astype(self.dtype)

    def attend(self, x_BxTxD: jax.Array) -> jax.Array:
        """Logits against every row, accumulated and returned in float32."""
        table = self.embedding[...].astype(self.dtype)
        if axis_size(CONTEXT_AXIS) > 1:  # the sequence is split: keep (batch, sequence) apart
            return float32_logits(x_BxTxD, table, "btd,vd->btv")
        x_NxD = x_BxTxD.reshape(-1, x_BxTxD.shape[-1])
        logits = float32_logits(x_NxD, table, "nd,vd->nv")
        return logits.reshape(*x_BxTxD.shape[:-1], table.shape[0])
