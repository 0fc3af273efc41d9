"""Rotary position embeddings (half-split layout, as in Hugging Face), with Llama 3 scaling."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Llama3Scaling:
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_len: int = 8192


def inverse_frequencies(
    head_dim: int, theta: float, scaling: Llama3Scaling | None = None
) -> np.ndarray:
    """``theta ** (-2i / head_dim)`` for i < head_dim / 2, in float32 (as transformers does)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv = (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)
    if scaling is None:
        return inv
    s = scaling
    low_wavelen = s.original_max_len / s.low_freq_factor
    high_wavelen = s.original_max_len / s.high_freq_factor
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / np.float32(s.factor), inv).astype(np.float32)
    smooth = (s.original_max_len / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / np.float32(s.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


class RoPE:
    """Rotates pairs (i, i + head_dim/2) of each head by ``position * inv_freq[i]``."""

    def __init__(self, head_dim: int, theta: float, scaling: Llama3Scaling | None = None) -> None:
        self.key = (head_dim, theta, scaling)
        self.inv_freq = inverse_frequencies(head_dim, theta, scaling)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoPE) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __call__(self, x_BxTxHxK: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        angles_BxTxF = positions_BxT.astype(jnp.float32)[..., None] * self.inv_freq
        cos = jnp.cos(angles_BxTxF)[:, :, None, :]
        sin = jnp.sin(angles_BxTxF)[:, :, None, :]
        x1, x2 = jnp.split(x_BxTxHxK.astype(jnp.float32), 2, axis=-1)
        out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        return out.astype(x_BxTxHxK.dtype)
