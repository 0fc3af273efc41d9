"""Causal self-attention (MHA, GQA, MQA) with padding, per-document and sliding-window masks.

The forward is a sequence of stages, each a small method to override in a subclass:
``project_qkv`` -> ``normalize_qk`` -> ``apply_positions`` -> (cache) -> ``scores`` ->
``mask`` -> ``weights`` -> ``combine`` -> ``output``.
Shapes: B batch, T queries, S keys, D d_model, H query heads, G kv heads, R = H / G, K head_dim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.layers.linear import Linear
from theseus.models.layers.norms import RMSNorm

NEG_INF = -1e30  # finite, so a fully masked row gives a uniform softmax, never NaN


class MaskInfo(NamedTuple):
    """What the mask is computed from: slot indices (causality) and segment ids (documents).

    ``q_slot`` (BxT) and ``k_slot`` (BxS) are indices in the sequence (or the cache); a query
    sees a key when ``k_slot <= q_slot`` and both have the same segment id (0 = padding).
    """

    q_slot: jax.Array
    k_slot: jax.Array
    q_segment: jax.Array
    k_segment: jax.Array


class LayerCache(NamedTuple):
    """One layer's keys and values (BxSxGxK) and where the new ones are written."""

    k: jax.Array
    v: jax.Array
    index: jax.Array


class KVCache(NamedTuple):
    """Keys/values of every layer (LxBxSxGxK), key segment ids (BxS) and the fill index."""

    k: jax.Array
    v: jax.Array
    segment_ids: jax.Array
    index: jax.Array

    @classmethod
    def zeros(
        cls,
        n_layers: int,
        batch: int,
        length: int,
        n_kv_heads: int,
        head_dim: int,
        dtype=jnp.float32,
    ) -> KVCache:
        shape = (n_layers, batch, length, n_kv_heads, head_dim)
        return cls(
            jnp.zeros(shape, dtype),
            jnp.zeros(shape, dtype),
            jnp.zeros((batch, length), jnp.int32),
            jnp.zeros((), jnp.int32),
        )


class Attention(nnx.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        qkv_bias: bool = False,
        out_bias: bool = False,
        rope: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
        qk_norm_eps: float | None = None,
        sliding_window: int = 0,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        if n_heads % n_kv_heads:
            from theseus.models.errors import ModelError

            raise ModelError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
        H, G, K, D = n_heads, n_kv_heads, head_dim, d_model
        kw = dict(std=std, dtype=dtype, rngs=rngs)
        self.q_proj = Linear((D,), (H, K), ("embed",), ("heads", "head_dim"), bias=qkv_bias, **kw)
        self.k_proj = Linear(
            (D,), (G, K), ("embed",), ("kv_heads", "head_dim"), bias=qkv_bias, **kw
        )
        self.v_proj = Linear(
            (D,), (G, K), ("embed",), ("kv_heads", "head_dim"), bias=qkv_bias, **kw
        )
        kw["std"] = std if out_std is None else out_std
        self.o_proj = Linear((H, K), (D,), ("heads", "head_dim"), ("embed",), bias=out_bias, **kw)
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(K, eps=qk_norm_eps, axis_name="head_dim", dtype=dtype)
            self.k_norm = RMSNorm(K, eps=qk_norm_eps, axis_name="head_dim", dtype=dtype)
        else:
            self.q_norm = self.k_norm = None
        self.rope = rope
        self.n_heads, self.n_kv_heads, self.head_dim = H, G, K
        self.sliding_window = sliding_window
        self.dtype = dtype

    # ------------------------------------------------------------------ the stages

    def project_qkv(self, x_BxTxD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return self.q_proj(x_BxTxD), self.k_proj(x_BxTxD), self.v_proj(x_BxTxD)

    def normalize_qk(self, q: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
        if self.q_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def apply_positions(
        self, q: jax.Array, k: jax.Array, positions_BxT: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        if self.rope is None:
            return q, k
        return self.rope(q, positions_BxT), self.rope(k, positions_BxT)

    def scores(self, q_BxTxHxK: jax.Array, k_BxSxGxK: jax.Array) -> jax.Array:
        """Scaled dot products, BxGxRxTxS in float32."""
        B, T, H, K = q_BxTxHxK.shape
        G = self.n_kv_heads
        q = q_BxTxHxK * (K**-0.5)
        f32 = jnp.float32
        if G == H:  # plain multi-head: 4-D einsums need fewer layout copies on CPU
            return jnp.einsum("bthk,bshk->bhts", q, k_BxSxGxK, preferred_element_type=f32)[
                :, :, None
            ]
        q = q.reshape(B, T, G, H // G, K)
        return jnp.einsum("btgrk,bsgk->bgrts", q, k_BxSxGxK, preferred_element_type=f32)

    def mask(self, scores_BxGxRxTxS: jax.Array, info: MaskInfo) -> jax.Array:
        """Causal within a segment (and a sliding window when set); masked scores -> -inf."""
        q = info.q_slot[:, :, None]
        k = info.k_slot[:, None, :]
        allowed_BxTxS = (k <= q) & (info.q_segment[:, :, None] == info.k_segment[:, None, :])
        if self.sliding_window:
            allowed_BxTxS &= q - k < self.sliding_window
        return jnp.where(allowed_BxTxS[:, None, None], scores_BxGxRxTxS, NEG_INF)

    def weights(self, scores_BxGxRxTxS: jax.Array) -> jax.Array:
        return jax.nn.softmax(scores_BxGxRxTxS.astype(jnp.float32), axis=-1)

    def combine(self, probs_BxGxRxTxS: jax.Array, v_BxSxGxK: jax.Array) -> jax.Array:
        B, G, R, T, S = probs_BxGxRxTxS.shape
        probs = probs_BxGxRxTxS.astype(self.dtype)
        if R == 1:
            return jnp.einsum("bhts,bshk->bthk", probs[:, :, 0], v_BxSxGxK)
        out = jnp.einsum("bgrts,bsgk->btgrk", probs, v_BxSxGxK)
        return out.reshape(B, T, G * R, -1)

    def output(self, o_BxTxHxK: jax.Array) -> jax.Array:
        return self.o_proj(o_BxTxHxK)

    # ------------------------------------------------------------------ the forward

    def __call__(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: LayerCache | None = None,
    ) -> tuple[jax.Array, LayerCache | None]:
        q, k, v = self.project_qkv(x_BxTxD)
        q, k = self.normalize_qk(q, k)
        q, k = self.apply_positions(q, k, positions_BxT)
        if cache is not None:
            start = (0, cache.index, 0, 0)
            k_all = jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), start)
            v_all = jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), start)
            cache = LayerCache(k_all, v_all, cache.index)
            k, v = k_all.astype(self.dtype), v_all.astype(self.dtype)
        scores = self.mask(self.scores(q, k), info)
        out = self.combine(self.weights(scores), v)
        return self.output(out), cache
