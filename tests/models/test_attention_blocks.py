"""Attention over blocks of queries equals attention over the whole causal square.

Without a cache, ``Attention`` runs its score stages on blocks of ``query_block`` queries
against only the keys each block can see. The skipped keys are exactly those the mask
removes, whose softmax weight is exactly 0 (exp(-1e30 - max) underflows), so the two paths
differ only in the order of float32 sums over at most S = 150 keys: worst case about
S * eps = 1.8e-5 relative, typically sqrt(S) * eps = 1.5e-6. The tolerances sit between.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.layers.attention import NEG_INF, Attention, MaskInfo
from theseus.models.layers.rope import RoPE

B, T, D, H, G, K = 2, 150, 32, 4, 2, 8


def packed_info() -> MaskInfo:
    """Two documents and a padded tail in row 0, one document in row 1."""
    seg = np.ones((B, T), np.int32)
    seg[0, 90:] = 2
    seg[0, 140:] = 0
    slot = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    seg = jnp.asarray(seg)
    return MaskInfo(slot, slot, seg, seg)


def attention(cls=Attention, sliding_window: int = 0, query_block: int = 32) -> Attention:
    rope = RoPE(K, 10000.0)
    layer = cls(D, H, G, K, rope=rope, sliding_window=sliding_window, rngs=nnx.Rngs(0))
    layer.query_block = query_block
    return layer


def output_and_grad(layer: Attention, x: jax.Array, info: MaskInfo):
    positions = info.q_slot
    graphdef, state = nnx.split(layer)

    def loss(x, state):
        out, _ = nnx.merge(graphdef, state)(x, positions, info)
        return jnp.sum(out * jnp.cos(out)), out  # a loss that weighs every output differently

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(x, state)
    return out, grads


@pytest.mark.parametrize("sliding_window", [0, 40])
def test_blocks_equal_the_whole_square(sliding_window):
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    info = packed_info()
    blocked = output_and_grad(attention(sliding_window=sliding_window), x, info)
    whole = output_and_grad(attention(sliding_window=sliding_window, query_block=0), x, info)
    for got, want in zip(jax.tree.leaves(blocked), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class PrefixAttention(Attention):
    """Bidirectional within a document: a query also sees later keys, so not causal."""

    causal = False

    def mask(self, scores, info):
        allowed = info.q_segment[:, :, None] == info.k_segment[:, None, :]
        return scores + jnp.where(allowed, 0.0, NEG_INF)[:, None, None]


def test_a_non_causal_mask_gets_every_key():
    x = jax.random.normal(jax.random.key(2), (B, T, D))
    info = packed_info()
    layer = attention(PrefixAttention)
    out, _ = layer(x, info.q_slot, info)
    # reference: plain softmax attention over all same-document keys, heads laid out by hand
    q, k, v = layer.project_qkv(x)
    q, k = layer.apply_positions(q, k, info.q_slot)
    k, v = (jnp.repeat(z, H // G, axis=2) for z in (k, v))
    scores = jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(K)
    same = info.q_segment[:, None, :, None] == info.k_segment[:, None, None, :]
    probs = jax.nn.softmax(jnp.where(same, scores, -jnp.inf), axis=-1)
    want = layer.output(jnp.einsum("bhts,bshk->bthk", probs, v))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # the same weights with the causal mask give another answer: later keys did count above
    causal, _ = attention()(x, info.q_slot, info)
    assert np.abs(np.asarray(causal) - np.asarray(out)).max() > 1e-2
