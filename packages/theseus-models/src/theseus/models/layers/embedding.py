"""Token (and learned position) embeddings; ``attend`` is the tied output head."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.models.layers.linear import param
from theseus.models.layers.mesh_axes import axis_size


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
            dims = (((2,), (1,)), ((), ()))
            return jax.lax.dot_general(x_BxTxD, table, dims, preferred_element_type=jnp.float32)
        x_NxD = x_BxTxD.reshape(-1, x_BxTxD.shape[-1])
        dims = (((1,), (1,)), ((), ()))
        logits = jax.lax.dot_general(x_NxD, table, dims, preferred_element_type=jnp.float32)
        return logits.reshape(*x_BxTxD.shape[:-1], table.shape[0])
