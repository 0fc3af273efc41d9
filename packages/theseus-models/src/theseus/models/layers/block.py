"""A pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))`` (and the
sandwich variant, with norms after each sublayer too).

The decoder keeps its blocks *stacked*: one block module whose every parameter has a leading
axis of length L (the layers, logical axis ``layers``), built by ``stack_blocks`` and run
under a scan, so the compiled program does not grow with depth. ``layer_of`` cuts one layer
out of such a stack as an ordinary block.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx import spmd
from jax.ad_checkpoint import checkpoint_name
from theseus.core.sharding.remat import MLP_OUT
from theseus.models.layers.attention import MaskInfo
from theseus.models.layers.kv_cache import LayerCache

LAYERS = "layers"  # the logical axis name of the stacked layer dimension
#: which layer a block is built for: an int, or (blocks built stacked, under ``nnx.vmap``)
#: a traced int32 scalar, usable in arithmetic but not in Python control flow
LayerIndex = int | jax.Array
LAYER_METADATA = {nnx.PARTITION_NAME: LAYERS}  # what nnx.vmap/scan add to (remove from) params


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

    def after_attention(self, h_BxTxD: jax.Array) -> jax.Array:
        """What the attention's output goes through before the residual add (nothing here)."""
        return h_BxTxD

    def after_feed_forward(self, h_BxTxD: jax.Array) -> jax.Array:
        """What the MLP's output goes through before the residual add (nothing here)."""
        return h_BxTxD

    def __call__(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: LayerCache | None = None,
    ) -> tuple[jax.Array, LayerCache | None, dict[str, jax.Array]]:
        h_BxTxD, cache = self.attention(self.attn_norm(x_BxTxD), positions_BxT, info, cache)
        x_BxTxD = x_BxTxD + self.after_attention(h_BxTxD)
        h_BxTxD, stats = self.feed_forward(self.mlp_norm(x_BxTxD), info.q_segment > 0)
        h_BxTxD = checkpoint_name(h_BxTxD, MLP_OUT)
        return x_BxTxD + self.after_feed_forward(h_BxTxD), cache, stats


class SandwichBlock(Block):
    """Norms on both sides of each sublayer (Gemma 2/3): ``x + norm(attn(norm(x)))``, then
    ``x + norm(mlp(norm(x)))``."""

    def __init__(
        self,
        attn_norm: nnx.Module,
        attention: nnx.Module,
        mlp_norm: nnx.Module,
        mlp: nnx.Module,
        post_attn_norm: nnx.Module,
        post_mlp_norm: nnx.Module,
    ) -> None:
        super().__init__(attn_norm, attention, mlp_norm, mlp)
        self.post_attn_norm = post_attn_norm
        self.post_mlp_norm = post_mlp_norm

    def after_attention(self, h_BxTxD: jax.Array) -> jax.Array:
        return self.post_attn_norm(h_BxTxD)

    def after_feed_forward(self, h_BxTxD: jax.Array) -> jax.Array:
        return self.post_mlp_norm(h_BxTxD)


def stack_blocks(
    make: Callable[[LayerIndex, nnx.Rngs], nnx.Module], n_layers: int, rngs: nnx.Rngs
) -> nnx.Module:
    """``make(index, rngs)`` for every layer, as one module with stacked parameters.

    ``make`` runs once under ``nnx.vmap``: ``index`` is a traced int32 scalar (usable in
    arithmetic, not in Python control flow), and the module it returns must have the same
    structure at every index. The random streams are split per layer, so every layer draws
    its own numbers (with the same distribution as an unstacked block). Each parameter gets
    a leading axis of length ``n_layers`` named ``layers`` in its ``out_sharding`` metadata.
    """

    @nnx.split_rngs(splits=n_layers)
    @nnx.vmap(in_axes=(0, 0), out_axes=0, axis_size=n_layers, transform_metadata=LAYER_METADATA)
    def build(index: jax.Array, layer_rngs: nnx.Rngs) -> nnx.Module:
        return make(index, layer_rngs)

    return build(jnp.arange(n_layers, dtype=jnp.int32), rngs)


def layer_of(stacked: nnx.Module, index: int) -> nnx.Module:
    """Layer ``index`` of a stack as a block of its own (its parameters are slices: copies)."""
    graphdef, state = nnx.split(stacked)
    sliced = jax.tree.map(lambda x: x[index], state)
    return nnx.merge(graphdef, spmd.remove_axis(sliced, 0, LAYER_METADATA))
