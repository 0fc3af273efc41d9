"""Causal attention through the Pallas TPU splash-attention kernel (segment ids included).

The kernel works on one sequence (HxTxK queries, GxTxK keys: grouped heads natively) and is
mapped over the batch. Its masks are static: causal, or causal within a sliding window
(``LocalMask``); documents are its ``SegmentIds``. Lengths are padded to the block size with
a segment id that only the padding shares (the kernel needs every row to see some key).
``interpret=True`` runs the kernel in the Pallas interpreter, on any backend (tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from theseus.models.layers.flash import pad_axis

PAD = -1  # segment id of the padding tokens: they see each other only


def splash_attention(
    q_BxHxTxK: jax.Array,
    k_BxGxTxK: jax.Array,
    v_BxGxTxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxT: jax.Array,
    *,
    window: int = 0,
    block: int = 128,
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
    length = -(-T // block) * block
    shape = (length, length)
    if window:
        head_mask = masks.LocalMask(shape, window_size=(window - 1, 0), offset=0)
    else:
        head_mask = masks.CausalMask(shape)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    kernel = splash.make_splash_mha(
        masks.MultiHeadMask([head_mask] * H),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )
    scale = K**-0.5 if scale is None else scale
    q, k, v = (pad_axis(z, 2, length, 0) for z in (q_BxHxTxK * scale, k_BxGxTxK, v_BxGxTxK))
    segments = splash.SegmentIds(
        pad_axis(q_segment_BxT.astype(jnp.int32), 1, length, PAD),
        pad_axis(k_segment_BxT.astype(jnp.int32), 1, length, PAD),
    )
    return jax.vmap(kernel)(q, k, v, segments)[:, :, :T]
