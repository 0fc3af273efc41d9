"""Multi-head latent attention (DeepSeek-V2/V3): keys and values up-projected from a small latent.

Each token writes a latent ``c`` (``kv_lora_rank`` wide, RMS-normalised) and one rotary key
``k_rope`` shared by all heads; each head's key is ``[c W_k_nope ; k_rope]`` and its value
``c W_v``. Queries come from ``x`` directly or through their own latent (``q_lora_rank``), and
split the same way into a position-free part and a rotary part. Only the rotary parts carry
positions (decoupled RoPE), so the cache keeps ``c`` and ``k_rope`` per position, not the
heads' keys and values: ``kv_lora_rank + qk_rope_dim`` numbers per token and layer instead
of ``2 x heads x head_dim`` (576 vs 32768 for DeepSeek-V3).

Shapes: C kv_lora_rank, N qk_nope_dim, P qk_rope_dim, V v_head_dim; queries and keys have
N + P per head (``head_dim``), values V (``v_head_dim``). The stages after the projections
are ``Attention``'s; the kernels (flash, cudnn, splash) want one head width, so for them the
narrower of (q, k) and v is zero-padded, which changes neither the scores nor the output.
Decoding expands the cached latent to keys and values at every step (through the same
``kv_b_proj``, so adapters on it apply); the absorbed form (queries multiplied into the
latent space) would skip that expansion and is not done here.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.execution import ExecutionPlan
from theseus.models.attention_choice import check_attention
from theseus.models.layers.attention import (
    Attention,
    MaskInfo,
    heads_first,
)
from theseus.models.layers.flash import pad_axis
from theseus.models.layers.kv_cache import LayerCache
from theseus.models.layers.linear import Linear
from theseus.models.layers.norms import RMSNorm


class MultiHeadLatentAttention(Attention):
    rope: Callable[[jax.Array, jax.Array], jax.Array]
    # the low-rank query (``q_lora_rank`` > 0), which replaces ``q_proj``
    q_a_proj: Linear
    q_a_norm: RMSNorm
    q_b_proj: Linear

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        q_lora_rank: int,
        kv_lora_rank: int,
        qk_nope_dim: int,
        qk_rope_dim: int,
        v_head_dim: int,
        rope: Callable[[jax.Array, jax.Array], jax.Array],
        norm_eps: float = 1e-6,
        scale: float | None = None,
        implementation: str = "auto",
        execution: ExecutionPlan | None = None,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        D, H, C, N, P, V = d_model, n_heads, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim
        kw = dict(std=std, dtype=dtype, rngs=rngs)
        heads = ("heads", "head_dim")
        self.q_lora_rank = q_lora_rank
        if q_lora_rank:
            self.q_a_proj = Linear((D,), (q_lora_rank,), ("embed",), ("latent",), **kw)
            self.q_a_norm = RMSNorm(q_lora_rank, eps=norm_eps, axis_name="latent", dtype=dtype)
            self.q_b_proj = Linear((q_lora_rank,), (H, N + P), ("latent",), heads, **kw)
        else:
            self.q_proj = Linear((D,), (H, N + P), ("embed",), heads, **kw)
        self.kv_a_proj = Linear((D,), (C + P,), ("embed",), ("latent",), **kw)
        self.kv_a_norm = RMSNorm(C, eps=norm_eps, axis_name="latent", dtype=dtype)
        self.kv_b_proj = Linear((C,), (H, N + V), ("latent",), heads, **kw)
        kw["std"] = std if out_std is None else out_std
        self.o_proj = Linear((H, V), (D,), heads, ("embed",), **kw)
        self.rope = rope
        self.n_heads, self.n_kv_heads, self.head_dim, self.v_head_dim = H, H, N + P, V
        self.kv_lora_rank, self.qk_nope_dim, self.qk_rope_dim = C, N, P
        self.scale = (N + P) ** -0.5 if scale is None else scale
        self.sliding_window = 0
        self.dtype = dtype
        self.implementation = implementation
        check_attention(implementation, self.overridden_stages(), layer=type(self).__name__)
        self._run_as_planned(execution)

    # ------------------------------------------------------------------ the projections

    def queries(self, x_BxTxD: jax.Array) -> jax.Array:
        """BxTxHx(N + P), before positions."""
        if not self.q_lora_rank:
            return self.q_proj(x_BxTxD)
        return self.q_b_proj(self.q_a_norm(self.q_a_proj(x_BxTxD)))

    def latent(self, x_BxTxD: jax.Array) -> tuple[jax.Array, jax.Array]:
        """What a token writes: its normalised latent BxTxC and its rotary key BxTxP (before
        positions)."""
        c_and_rope = self.kv_a_proj(x_BxTxD)
        C = self.kv_lora_rank
        return self.kv_a_norm(c_and_rope[..., :C]), c_and_rope[..., C:]

    def expand(self, c_BxSxC: jax.Array, k_rope_BxSxP: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Every head's keys BxSxHx(N + P) and values BxSxHxV from the latents and rotary keys."""
        kv_BxSxHxNV = self.kv_b_proj(c_BxSxC)
        N = self.qk_nope_dim
        k_nope, v = kv_BxSxHxNV[..., :N], kv_BxSxHxNV[..., N:]
        k_rope = jnp.broadcast_to(k_rope_BxSxP[:, :, None], (*k_nope.shape[:3], self.qk_rope_dim))
        return jnp.concatenate([k_nope, k_rope.astype(k_nope.dtype)], axis=-1), v

    def cache_shape(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The latent (1 x C) in the key slot, the rotary key (1 x P) in the value slot."""
        return (1, self.kv_lora_rank), (1, self.qk_rope_dim)

    # ------------------------------------------------------------------ the forward

    def attend_self(
        self, q_BxHxTxK: jax.Array, k_BxGxTxK: jax.Array, v_BxGxTxV: jax.Array, info: MaskInfo
    ) -> jax.Array:
        """``Attention.attend_self``; a kernel gets q, k and v zero-padded to one width."""
        K, V = self.head_dim, self.v_head_dim
        if K == V or self.kernel.name == "reference":
            return super().attend_self(q_BxHxTxK, k_BxGxTxK, v_BxGxTxV, info)
        width = max(K, V)
        q, k, v = (pad_axis(z, 3, width, 0) for z in (q_BxHxTxK, k_BxGxTxK, v_BxGxTxV))
        return super().attend_self(q, k, v, info)[..., :V]

    def __call__(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: LayerCache | None = None,
    ) -> tuple[jax.Array, LayerCache | None]:
        N = self.qk_nope_dim
        q = self.queries(x_BxTxD)
        c_BxTxC, k_rope_BxTxP = self.latent(x_BxTxD)
        q_rope = self.rope(q[..., N:], positions_BxT)
        k_rope_BxTxP = self.rope(k_rope_BxTxP[:, :, None], positions_BxT)[:, :, 0]
        q = jnp.concatenate([q[..., :N], q_rope], axis=-1)
        prefill = cache is None or cache.fresh  # the tokens attend among themselves
        if cache is not None:  # the latents and rotary keys of every position so far
            cache = cache.write(c_BxTxC, k_rope_BxTxP)
            if not cache.fresh:
                c_all, rope_all = cache.layer_kv()
                c_BxTxC, k_rope_BxTxP = c_all.astype(self.dtype), rope_all.astype(self.dtype)
        k, v = self.expand(c_BxTxC, k_rope_BxTxP)
        q, k, v = (heads_first(z) for z in (q, k, v))
        if prefill:
            out = self.attend_self(q, k, v, info.prefix(q.shape[2]))
        else:
            out = self.attend(q, k, v, info)
        return self.output(heads_first(out)), cache
