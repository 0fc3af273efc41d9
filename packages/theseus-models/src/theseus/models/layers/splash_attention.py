"""Causal attention through the Pallas TPU splash-attention kernel (segment ids included).

The kernel works on one sequence (HxTxK queries, GxTxK keys: grouped heads natively);
``jax.vmap`` over the batch becomes one more axis of the kernel's own grid (one call per
step, not one per row). Its masks are static: causal, or causal within a sliding window
(``LocalMask``); documents are its ``SegmentIds``. Its block sizes come from the measured
table (``theseus.models.splash_blocks``). Lengths are padded to the blocks with a segment id
that only the padding shares (the kernel needs every row to see some key).

The kernel's output and log-sum-exp are tagged ``attention`` (``checkpoint_name``): every
remat level but ``full`` keeps them, so the backward pass runs the kernel's backward only,
not its forward a second time. ``interpret=True`` runs the kernel in the Pallas interpreter,
on any backend (tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from theseus.core.sharding.remat import ATTENTION
from theseus.models.layers.flash import pad_axis
from theseus.models.splash_blocks import DEFAULT, SplashBlocks

PAD = -1  # segment id of the padding tokens: they see each other only


def splash_attention(
    q_BxHxTxK: jax.Array,
    k_BxGxTxK: jax.Array,
    v_BxGxTxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxT: jax.Array,
    *,
    window: int = 0,
    blocks: SplashBlocks = DEFAULT,
    interpret: bool = False,
    scale: float | None = None,
) -> jax.Array:
    """softmax(scale q k^T + mask) v for self-attention, BxHxTxK (``scale`` 1 / sqrt(K)
    unless given)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash,
    )
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_mask as masks,
    )

    B, H, T, K = q_BxHxTxK.shape
    blocks = blocks.clamped(T)
    step = blocks.padded_to
    length = -(-T // step) * step
    shape = (length, length)
    head_mask: masks.Mask
    if window:
        head_mask = masks.LocalMask(shape, window_size=(window - 1, 0), offset=0)
    else:
        head_mask = masks.CausalMask(shape)
    sizes = splash.BlockSizes(
        block_q=blocks.q,
        block_kv=blocks.kv,
        block_kv_compute=blocks.kv_compute,
        block_q_dkv=blocks.q_dkv,
        block_kv_dkv=blocks.kv_dkv,
        block_kv_dkv_compute=blocks.kv_dkv_compute,
        use_fused_bwd_kernel=blocks.fused_bwd,
        block_q_dq=None if blocks.fused_bwd else blocks.q_dq,
        block_kv_dq=None if blocks.fused_bwd else blocks.kv_dq,
    )
    kernel = splash.make_splash_mha(
        masks.MultiHeadMask([head_mask] * H),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        residual_checkpoint_name=ATTENTION,
        interpret=interpret,
    )
    scale = K**-0.5 if scale is None else scale
    q, k, v = (pad_axis(z, 2, length, 0) for z in (q_BxHxTxK * scale, k_BxGxTxK, v_BxGxTxK))
    segments = splash.SegmentIds(
        pad_axis(q_segment_BxT.astype(jnp.int32), 1, length, PAD),
        pad_axis(k_segment_BxT.astype(jnp.int32), 1, length, PAD),
    )
    return jax.vmap(kernel)(q, k, v, segments)[:, :, :T]
