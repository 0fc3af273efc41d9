"""Causal self-attention (MHA, GQA, MQA) with padding, per-document and sliding-window masks.

The forward is a sequence of stages, each a small method to override in a subclass:
``project_qkv`` -> ``normalize_qk`` -> ``apply_positions`` -> (heads first, cache) ->
``scores`` -> ``mask`` -> ``weights`` -> ``combine`` -> ``output``.
Shapes: B batch, T queries, S keys, D d_model, H query heads, G kv heads, R = H / G, K head_dim
(of queries and keys; values have ``v_head_dim``, K unless set). The scores are scaled by
``scale`` (1 / sqrt(K) unless set).
Projections and positions work on BxTxHxK; from ``scores`` to ``combine`` the heads come first
(BxHxTxK, BxGxSxK), so every product is a plain batched matmul over (B, G).

Without a cache, ``implementation`` (the model's ``attention`` option) says what computes the
four score stages (see ``theseus.models.attention_choice``): ``reference`` runs the stages
themselves; ``flash`` (``layers/flash.py``), ``cudnn`` and ``splash`` compute the same
attention in one piece, with memory linear in T. The choice is the model's execution plan
(``theseus.core.execution``): :meth:`choose` answers what would run for a platform, a length
and a context split (a question; the training setup asks it once), and the layer is built
with the plan (``execution``): its kernel, its context split, the mesh's axis sizes and
chips; nothing about the mesh in context or the backend is read while it is traced. A layer
built without a plan runs ``model.attention`` as named, and the reference stages for
``auto``. A subclass that overrides a stage runs ``reference`` under ``auto`` and is refused
an explicit kernel. With a cache (generation) the stages always run.

With ``sharding.context`` > 1 the plan's context split (ring or all-gather, in an order)
reaches the layer the same way: self-attention runs ``layers/context_attention.py`` (its
blocks computed by the flash kernel) over the plan's ``context`` axis. A model used outside
the step (evaluations, generation) is built with the plan unsplit (``ExecutionPlan.unsplit``)
and runs as above on whole sequences.

The reference goes through the stages in blocks of ``query_block`` query rows, each against
only the keys it can see (up to its last query, and from the first key its sliding window
reaches). On CPU that keeps the score blocks in cache and skips the fully masked half of the
causal square; the result is the same attention. A subclass that overrides ``mask`` with
something that is not causal (keys after the query allowed) must set ``causal = False``,
which turns the skipping off.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from theseus.core.execution import AttentionKernel, ContextSplit, ExecutionPlan
from theseus.core.sharding.remat import ATTENTION, ATTENTION_OUT, QKV
from theseus.core.sharding.rules import TENSOR_AXIS
from theseus.models.attention_choice import (
    STAGES,
    check_attention,
    resolve_attention,
    unplanned_kernel,
)
from theseus.models.errors import ModelError
from theseus.models.layers.context_attention import METHODS, context_attention
from theseus.models.layers.cudnn_attention import cudnn_attention
from theseus.models.layers.decode_attention import decode_attention, first_slots
from theseus.models.layers.flash import flash_attention
from theseus.models.layers.kernel_sharding import per_shard, per_shard_decode
from theseus.models.layers.kv_cache import LayerCache
from theseus.models.layers.linear import Linear
from theseus.models.layers.norms import RMSNorm
from theseus.models.layers.splash_attention import splash_attention
from theseus.models.splash_blocks import SplashBlocks, splash_blocks

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

    def prefix(self, length: int) -> MaskInfo:
        """The mask of the first ``length`` keys alone (a prefill's own tokens)."""
        return MaskInfo(
            self.q_slot, self.k_slot[:, :length], self.q_segment, self.k_segment[:, :length]
        )


class Attention(nnx.Module):
    causal = True  # the mask never lets a query see a later key (see the module docstring)
    query_block = 64  # reference: rows of queries per block without a cache; 0: one block
    flash_block = 128  # flash: queries and keys per block
    kernel_interpret = False  # splash: run the Pallas kernel in its interpreter (tests off TPU)

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
        qk_norm_offset: float = 0.0,
        sliding_window: int = 0,
        scale: float | None = None,
        v_head_dim: int | None = None,
        implementation: str = "auto",
        execution: ExecutionPlan | None = None,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        """``execution``: the model's plan (its kernel, context split, mesh); without one
        the layer runs ``implementation`` as named, the reference stages for ``auto``."""
        if n_heads % n_kv_heads:
            raise ModelError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
        H, G, K, D = n_heads, n_kv_heads, head_dim, d_model
        V = v_head_dim or K
        # the projections gather their kernels themselves under fsdp (see Linear)
        kw = dict(std=std, dtype=dtype, rngs=rngs, gather=True)
        self.q_proj = Linear((D,), (H, K), ("embed",), ("heads", "head_dim"), bias=qkv_bias, **kw)
        self.k_proj = Linear(
            (D,), (G, K), ("embed",), ("kv_heads", "head_dim"), bias=qkv_bias, **kw
        )
        self.v_proj = Linear(
            (D,), (G, V), ("embed",), ("kv_heads", "head_dim"), bias=qkv_bias, **kw
        )
        kw["std"] = std if out_std is None else out_std
        self.o_proj = Linear((H, V), (D,), ("heads", "head_dim"), ("embed",), bias=out_bias, **kw)
        self.q_norm: RMSNorm | None
        self.k_norm: RMSNorm | None
        if qk_norm_eps is not None:
            norm = partial(
                RMSNorm, eps=qk_norm_eps, axis_name="head_dim", offset=qk_norm_offset, dtype=dtype
            )
            self.q_norm, self.k_norm = norm(K), norm(K)
        else:
            self.q_norm = self.k_norm = None
        self.rope = rope
        self.n_heads, self.n_kv_heads, self.head_dim, self.v_head_dim = H, G, K, V
        self.scale = K**-0.5 if scale is None else scale
        self.sliding_window = sliding_window
        self.dtype = dtype
        self.implementation = implementation  # what model.attention asked for
        # refuse an unknown name, or a kernel that would skip an overridden stage, right away
        check_attention(implementation, self.overridden_stages(), layer=type(self).__name__)
        self._run_as_planned(execution)

    # ------------------------------------------------------------------ the stages

    def project_qkv(self, x_BxTxD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        return self.q_proj(x_BxTxD), self.k_proj(x_BxTxD), self.v_proj(x_BxTxD)

    def normalize_qk(self, q: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
        if self.q_norm is None or self.k_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def apply_positions(
        self, q: jax.Array, k: jax.Array, positions_BxT: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        if self.rope is None:
            return q, k
        return self.rope(q, positions_BxT), self.rope(k, positions_BxT)

    def scores(self, q_BxHxTxK: jax.Array, k_BxGxSxK: jax.Array) -> jax.Array:
        """Scaled dot products, BxGxRxTxS in float32."""
        B, H, T, K = q_BxHxTxK.shape
        G, S = k_BxGxSxK.shape[1], k_BxGxSxK.shape[2]
        q = (q_BxHxTxK * self.scale).reshape(B, G, (H // G) * T, K)  # h = g * R + r
        s = jnp.einsum("bgmk,bgsk->bgms", q, k_BxGxSxK, preferred_element_type=jnp.float32)
        return s.reshape(B, G, H // G, T, S)

    def mask(self, scores_BxGxRxTxS: jax.Array, info: MaskInfo) -> jax.Array:
        """Causal within a segment (and a sliding window when set); masked scores -> -inf.

        The mask is added rather than selected: its gradient is then the identity.
        """
        q = info.q_slot[:, :, None]
        k = info.k_slot[:, None, :]
        allowed_BxTxS = (k <= q) & (info.q_segment[:, :, None] == info.k_segment[:, None, :])
        if self.sliding_window:
            allowed_BxTxS &= q - k < self.sliding_window
        bias = jnp.where(allowed_BxTxS, 0.0, NEG_INF).astype(scores_BxGxRxTxS.dtype)
        return scores_BxGxRxTxS + bias[:, None, None]

    def weights(self, scores_BxGxRxTxS: jax.Array) -> jax.Array:
        return jax.nn.softmax(scores_BxGxRxTxS.astype(jnp.float32), axis=-1)

    def combine(self, probs_BxGxRxTxS: jax.Array, v_BxGxSxK: jax.Array) -> jax.Array:
        """Probability-weighted values, BxHxTxK."""
        B, G, R, T, S = probs_BxGxRxTxS.shape
        probs = probs_BxGxRxTxS.astype(self.dtype).reshape(B, G, R * T, S)
        out = jnp.einsum("bgms,bgsk->bgmk", probs, v_BxGxSxK)
        return out.reshape(B, G * R, T, -1)

    def output(self, o_BxTxHxK: jax.Array) -> jax.Array:
        return self.o_proj(o_BxTxHxK)

    # ------------------------------------------------------------------ the forward

    def attend(
        self, q_BxHxTxK: jax.Array, k_BxGxSxK: jax.Array, v_BxGxSxK: jax.Array, info: MaskInfo
    ) -> jax.Array:
        """scores -> mask -> weights -> combine over all the keys, BxHxTxK."""
        scores = self.mask(self.scores(q_BxHxTxK, k_BxGxSxK), info)
        return self.combine(self.weights(scores), v_BxGxSxK)

    def attend_in_blocks(
        self, q_BxHxTxK: jax.Array, k_BxGxTxK: jax.Array, v_BxGxTxK: jax.Array, info: MaskInfo
    ) -> jax.Array:
        """``attend`` for self-attention, one block of queries at a time against the keys it
        can see; the keys a block skips are ones the causal (and window) mask removes."""
        T = q_BxHxTxK.shape[2]
        size = self.query_block
        if not self.causal or not size or T <= size:
            return self.attend(q_BxHxTxK, k_BxGxTxK, v_BxGxTxK, info)
        blocks = []
        for start in range(0, T, size):
            end = min(start + size, T)
            first = max(0, start - self.sliding_window + 1) if self.sliding_window else 0
            part = MaskInfo(
                info.q_slot[:, start:end],
                info.k_slot[:, first:end],
                info.q_segment[:, start:end],
                info.k_segment[:, first:end],
            )
            keys, values = k_BxGxTxK[:, :, first:end], v_BxGxTxK[:, :, first:end]
            blocks.append(self.attend(q_BxHxTxK[:, :, start:end], keys, values, part))
        return jnp.concatenate(blocks, axis=2)

    def attend_cached(
        self,
        q_BxHxTxK: jax.Array,
        k_BxGxTxK: jax.Array,
        v_BxGxTxK: jax.Array,
        info: MaskInfo,
        cache: LayerCache,
    ) -> jax.Array:
        """Attention of new tokens whose keys and values ``cache`` already holds, BxHxTxK.

        A prefill (a fresh cache: the tokens are all there is) runs the planned kernel over
        the tokens themselves; a decoding step reads the layer's cache as its ``reader``
        says (the kernel over the written slots, for one token per row and the reference
        mask), else the stages over every slot with the mask."""
        T = q_BxHxTxK.shape[2]
        if cache.fresh and not self.context.split:
            return self.attend_self(q_BxHxTxK, k_BxGxTxK, v_BxGxTxK, info.prefix(T))
        if cache.reader != "reference" and T == 1 and not self.overridden_stages():
            kernel = partial(
                decode_attention,
                window=self.sliding_window,
                scale=self.scale,
                interpret=cache.reader == "pallas_interpret",
            )
            end = cache.index + 1
            first = first_slots(info.k_segment)  # the decoding loop left-pads its prompts
            out = per_shard_decode(
                kernel,
                dict(self.mesh_sizes),
                q_BxHxTxK[:, :, 0],
                cache.k,
                cache.v,
                cache.layer,
                end,
                first,
                self.n_kv_heads,
            )
            return out[:, :, None]
        k_all, v_all = (
            heads_apart(x, self.n_kv_heads).astype(self.dtype) for x in cache.layer_kv()
        )
        return self.attend(q_BxHxTxK, k_all, v_all, info)

    def cache_shape(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(heads, head_dim) of what the cache keeps per position in its key and value slots
        (side by side: ``G * K`` values a position)."""
        return (self.n_kv_heads, self.head_dim), (self.n_kv_heads, self.v_head_dim)

    def overridden_stages(self) -> tuple[str, ...]:
        """The score stages (and ``attend``) this layer's class overrides."""
        return overridden_stages(type(self))

    def context_problem(self, method: str) -> str | None:
        """Why this layer cannot attend over a sequence split by ``method`` (ring or
        all_gather), or None."""
        if method not in METHODS:
            return f"sharding.context_attention={method!r}: expected one of {', '.join(METHODS)}"
        if self.implementation not in ("auto", "flash"):
            return (
                f"model.attention={self.implementation} cannot compute the blocks of "
                "context-parallel attention (sharding.context > 1 merges blocks by their "
                "logsumexp, which the flash kernel returns): use model.attention=flash or auto"
            )
        stages = self.overridden_stages()
        if stages:
            return (
                f"sharding.context > 1 runs the flash kernel's causal, document and window "
                f"mask, but {type(self).__name__} overrides Attention.{stages[0]}: use "
                "sharding.context=1 for this layer"
            )
        return None

    def implementation_for(
        self,
        seq_len: int,
        platform: str | None = None,
        device_kind: str = "",
        head_shards: int | None = None,
    ) -> str:
        """What would compute self-attention over ``seq_len`` tokens on ``platform``
        (default: the plan's, where this layer runs) with the heads split ``head_shards``
        ways (default: the plan's ``tensor`` axis); a question, nothing is stored."""
        if platform is None:
            platform, device_kind = self.platform, self.device_kind
            shards = dict(self.mesh_sizes).get(TENSOR_AXIS, 1)
            head_shards = shards if head_shards is None else head_shards
        return resolve_attention(
            self.implementation,
            platform,
            seq_len,
            self.overridden_stages(),
            dtype=jnp.dtype(self.dtype).name,
            head_dim=self.head_dim,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            head_shards=head_shards or 1,
            device_kind=device_kind,
            interpret=self.kernel_interpret,
            layer=type(self).__name__,
        )

    def choose(
        self,
        seq_len: int,
        platform: str,
        device_kind: str = "",
        head_shards: int = 1,
        context: ContextSplit | None = None,
    ) -> AttentionKernel:
        """The kernel this layer would run over ``seq_len`` tokens on ``platform`` (a chip
        of ``device_kind``, the heads split ``head_shards`` ways), with the sequence split as
        ``context`` says: a question, nothing is stored. Raises a one-line ModelError for a
        split the layer cannot attend over."""
        if context is not None and context.split:
            problem = self.context_problem(context.method)
            if problem:
                raise ModelError(problem)
            return AttentionKernel("flash", context=context.method)
        name = self.implementation_for(seq_len, platform, device_kind, head_shards)
        blocks = splash_blocks(device_kind, seq_len, self.head_dim) if name == "splash" else None
        return AttentionKernel(name, blocks=blocks)

    def _run_as_planned(self, execution: ExecutionPlan | None) -> None:
        """Part of building the layer: the kernel, the context split and the mesh (its axis
        sizes, its chips) it runs with, as ``execution`` says; without a plan, the layer's
        ``implementation`` as named (the reference stages for ``auto``) on this process's
        backend. A layer whose class overrides a stage runs the reference stages, as ``auto``
        means for it."""
        plan = execution or ExecutionPlan(attention=unplanned_kernel(self.implementation))
        kernel, context = plan.attention, plan.context
        if self.overridden_stages() and not context.split:
            kernel = AttentionKernel("reference", why=f"{type(self).__name__} overrides a stage")
        self.kernel = kernel
        self.context = context
        self.mesh_sizes = plan.mesh_axes  # (axis, size) pairs: hashable, part of the graph
        self.platform = plan.platform or jax.default_backend()
        self.device_kind = plan.device_kind

    def attend_self(
        self, q_BxHxTxK: jax.Array, k_BxGxTxK: jax.Array, v_BxGxTxK: jax.Array, info: MaskInfo
    ) -> jax.Array:
        """Self-attention without a cache, by the planned kernel; BxHxTxK.

        The kernels implement this class's ``mask`` (causal, per document, sliding window)
        with query and key positions 0..T-1, which is what ``info`` holds without a cache.
        Split over ``context``, positions come from the sequence layout instead. cuDNN and
        splash run per shard of the plan's mesh (``kernel_sharding``): the rows over its
        batch axes, the heads over ``tensor``.
        """
        sizes = dict(self.mesh_sizes)
        if self.context.split:
            return context_attention(
                q_BxHxTxK,
                k_BxGxTxK,
                v_BxGxTxK,
                info.q_segment,
                info.k_segment,
                method=self.context.method,
                order=self.context.order,
                sizes=sizes,
                window=self.sliding_window,
                block=self.flash_block,
            )
        name = self.kernel.name
        if not self.kernel.planned:  # no plan chose it: refuse a platform it cannot run on
            self.implementation_for(q_BxHxTxK.shape[2])
        if name == "reference":
            return self.attend_in_blocks(q_BxHxTxK, k_BxGxTxK, v_BxGxTxK, info)
        args = (q_BxHxTxK, k_BxGxTxK, v_BxGxTxK, info.q_segment, info.k_segment)
        window, scale = self.sliding_window, self.scale
        if name == "flash":
            size = self.flash_block
            return flash_attention(*args, window=window, scale=scale, block_q=size, block_k=size)
        if name == "cudnn":
            return per_shard(partial(cudnn_attention, window=window, scale=scale), sizes, *args)
        blocks = self.kernel.blocks
        if not isinstance(blocks, SplashBlocks):  # no chip's table: sized for this length
            blocks = splash_blocks("", q_BxHxTxK.shape[2], self.head_dim)
        kernel = partial(
            splash_attention,
            window=window,
            scale=scale,
            blocks=blocks,
            interpret=self.kernel_interpret,
        )
        return per_shard(kernel, sizes, *args)

    def __call__(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: LayerCache | None = None,
    ) -> tuple[jax.Array, LayerCache | None]:
        q, k, v = (keep_merged(z, QKV) for z in self.project_qkv(x_BxTxD))
        q, k = self.normalize_qk(q, k)
        q, k = self.apply_positions(q, k, positions_BxT)
        q, k, v = (heads_first(z) for z in (q, k, v))
        if cache is None:
            out = self.attend_self(q, k, v, info)
        else:
            cache = cache.write(merged_heads(k), merged_heads(v))
            out = self.attend_cached(q, k, v, info, cache)
        out_BxTxHxK = heads_first(out)
        if cache is None and self.kernel.name != "splash":  # splash tags its own output
            out_BxTxHxK = keep_merged(out_BxTxHxK, ATTENTION)
        return checkpoint_name(self.output(out_BxTxHxK), ATTENTION_OUT), cache


def overridden_stages(cls: type) -> tuple[str, ...]:
    """The stages of ``STAGES`` (and ``attend``, which runs them) that ``cls`` overrides."""
    return tuple(
        name for name in (*STAGES, "attend") if getattr(cls, name) is not getattr(Attention, name)
    )


def keep_merged(x: jax.Array, name: str) -> jax.Array:
    """``x`` tagged ``name`` for the remat policies, with its two minor axes merged (heads
    and head_dim: BxTxHxK as BxTx(H*K)), so a kept copy is laid out without padding: on a TPU
    a minor axis of 64 is stored padded to 128 lanes, twice the bytes."""
    if x.ndim != 4:
        return checkpoint_name(x, name)
    return checkpoint_name(x.reshape(*x.shape[:-2], -1), name).reshape(x.shape)


def heads_first(x: jax.Array) -> jax.Array:
    """BxTxHxK <-> BxHxTxK (the same swap both ways)."""
    return x.transpose(0, 2, 1, 3)


def merged_heads(x_BxGxTxK: jax.Array) -> jax.Array:
    """BxGxTxK -> BxTx(G*K): each position's heads side by side, as the cache keeps them."""
    B, G, T, K = x_BxGxTxK.shape
    return heads_first(x_BxGxTxK).reshape(B, T, G * K)


def heads_apart(x_BxSxW: jax.Array, heads: int) -> jax.Array:
    """BxSx(G*K) -> BxGxSxK."""
    B, S, W = x_BxSxW.shape
    return heads_first(x_BxSxW.reshape(B, S, heads, W // heads))
