"""Causal attention through cuDNN's fused kernel (``jax.nn.dot_product_attention``).

cuDNN has no segment ids: the documents become a boolean mask BxTxS, which the kernel turns
into an additive bias (one per sequence, shared by the heads). Causality and the sliding
window are the kernel's own masks, so it skips the blocks they remove. With a bias, training
needs an even length: an odd one gets one padding token that only sees itself.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from theseus.models.layers.flash import pad_axis

PAD = -1  # segment id of the padding token: it sees only itself, and nothing sees it


def cudnn_attention(
    q_BxHxTxK: jax.Array,
    k_BxGxTxK: jax.Array,
    v_BxGxTxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxT: jax.Array,
    *,
    window: int = 0,
    scale: float | None = None,
    implementation: Literal["cudnn", "xla"] = "cudnn",
) -> jax.Array:
    """softmax(scale q k^T + mask) v for self-attention, BxHxTxK (``scale`` 1 / sqrt(K)
    unless given).

    ``implementation="xla"`` runs the same call through XLA: the tests use it on CPU.
    """
    T = q_BxHxTxK.shape[2]
    length = T + T % 2
    q_BxTxHxK, k_BxTxGxK, v_BxTxGxK = (
        pad_axis(z.transpose(0, 2, 1, 3), 1, length, 0) for z in (q_BxHxTxK, k_BxGxTxK, v_BxGxTxK)
    )
    q_seg_BxT = pad_axis(q_segment_BxT.astype(jnp.int32), 1, length, PAD)
    k_seg_BxT = pad_axis(k_segment_BxT.astype(jnp.int32), 1, length, PAD)
    same_Bx1xTxT = q_seg_BxT[:, None, :, None] == k_seg_BxT[:, None, None, :]
    out_BxTxHxK = jax.nn.dot_product_attention(
        q_BxTxHxK,
        k_BxTxGxK,
        v_BxTxGxK,
        mask=same_Bx1xTxT,
        scale=scale,
        is_causal=True,
        local_window_size=(window - 1, 0) if window else None,
        implementation=implementation,
    )
    return out_BxTxHxK[:, :T].transpose(0, 2, 1, 3)
