"""A pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

from __future__ import annotations

import jax
from flax import nnx
from theseus.models.layers.attention import LayerCache, MaskInfo


class Block(nnx.Module):
    def __init__(
        self, attn_norm: nnx.Module, attention: nnx.Module, mlp_norm: nnx.Module, mlp: nnx.Module
    ) -> None:
        self.attn_norm = attn_norm
        self.attention = attention
        self.mlp_norm = mlp_norm
        self.mlp = mlp

    def feed_forward(
        self, h_BxTxD: jax.Array, valid_BxT: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The MLP's output and its statistics for the model's ``aux_losses`` (none here).

        ``valid_BxT`` marks the real tokens (not padding) for a subclass that counts them.
        """
        return self.mlp(h_BxTxD), {}

    def __call__(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: LayerCache | None = None,
    ) -> tuple[jax.Array, LayerCache | None, dict[str, jax.Array]]:
        h_BxTxD, cache = self.attention(self.attn_norm(x_BxTxD), positions_BxT, info, cache)
        x_BxTxD = x_BxTxD + h_BxTxD
        h_BxTxD, stats = self.feed_forward(self.mlp_norm(x_BxTxD), info.q_segment > 0)
        return x_BxTxD + h_BxTxD, cache, stats
