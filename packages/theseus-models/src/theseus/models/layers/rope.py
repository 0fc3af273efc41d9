"""Rotary position embeddings (half-split layout, as in Hugging Face), with frequency scalings.

Scalings of the inverse frequencies, each a frozen dataclass (hashable: part of the graphdef):
``Llama3Scaling`` (Llama 3.1), ``LinearScaling`` (positions divided by a factor: Gemma 3's
global layers) and ``YarnScaling`` (YaRN: DeepSeek-V3), which also scales cos and sin by its
``attention_factor``. ``interleaved=True`` rotates the pairs (2i, 2i + 1) instead of
(i, i + K/2) (DeepSeek's layout); its output is in the half-split layout, which a dot product
between queries and keys rotated alike does not see.
"""

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


@dataclass(frozen=True)
class LinearScaling:
    factor: float = 8.0


@dataclass(frozen=True)
class YarnScaling:
    """YaRN (Peng et al., 2023): interpolate the low frequencies by ``factor``, keep the high
    ones, ramp in between (``beta_fast``/``beta_slow`` rotations over the original length)."""

    factor: float = 40.0
    original_max_len: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0

    @property
    def attention_factor(self) -> float:
        """What cos and sin are multiplied by."""
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(
                self.factor, self.mscale_all_dim
            )
        return yarn_mscale(self.factor)

    @property
    def softmax_factor(self) -> float:
        """What the attention's softmax scale is multiplied by (DeepSeek's MLA): ``m^2`` for
        ``m = yarn_mscale(factor, mscale_all_dim)``, 1 without ``mscale_all_dim``."""
        m = yarn_mscale(self.factor, self.mscale_all_dim) if self.mscale_all_dim else 1.0
        return m * m


Scaling = Llama3Scaling | LinearScaling | YarnScaling


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature ``0.1 * mscale * ln(factor) + 1`` (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_frequencies(head_dim: int, theta: float, s: YarnScaling) -> np.ndarray:
    """Blend of the original (extrapolated) and the ``factor``-interpolated frequencies."""
    inv = inverse_frequencies(head_dim, theta)

    def dimension(rotations: float) -> float:  # the dimension that turns ``rotations`` times
        wavelengths = s.original_max_len / (rotations * 2 * math.pi)
        return head_dim * math.log(wavelengths) / (2 * math.log(theta))

    low = max(math.floor(dimension(s.beta_fast)), 0)
    high: float = min(math.ceil(dimension(s.beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    keep = (1 - ramp).astype(np.float32)  # 1: the original frequency, 0: interpolated
    interpolated = (inv / np.float32(s.factor)).astype(np.float32)
    return (interpolated * (1 - keep) + inv * keep).astype(np.float32)


def inverse_frequencies(head_dim: int, theta: float, scaling: Scaling | None = None) -> np.ndarray:
    """``theta ** (-2i / head_dim)`` for i < head_dim / 2, in float32 (as transformers does)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv = (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)
    if scaling is None:
        return inv
    if isinstance(scaling, LinearScaling):
        return (inv / np.float32(scaling.factor)).astype(np.float32)
    if isinstance(scaling, YarnScaling):
        return yarn_frequencies(head_dim, theta, scaling)
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
    """Rotates pairs (i, i + head_dim/2) of each head by ``position * inv_freq[i]``
    (pairs (2i, 2i + 1) when ``interleaved``)."""

    def __init__(
        self,
        head_dim: int,
        theta: float,
        scaling: Scaling | None = None,
        *,
        interleaved: bool = False,
    ) -> None:
        self.key = (head_dim, theta, scaling, interleaved)
        self.inv_freq = inverse_frequencies(head_dim, theta, scaling)
        self.factor = scaling.attention_factor if isinstance(scaling, YarnScaling) else 1.0
        self.interleaved = interleaved

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoPE) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __call__(self, x_BxTxHxK: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        """``x`` rotated by its positions (see :func:`rotate`), in ``x``'s dtype."""
        angles_BxTxF = positions_BxT.astype(jnp.float32)[..., None] * self.inv_freq
        cos_BxTxF, sin_BxTxF = jnp.cos(angles_BxTxF), jnp.sin(angles_BxTxF)
        if self.factor != 1.0:
            cos_BxTxF, sin_BxTxF = cos_BxTxF * self.factor, sin_BxTxF * self.factor
        cos = jnp.concatenate([cos_BxTxF, cos_BxTxF], axis=-1)[:, :, None, :]
        sin = jnp.concatenate([sin_BxTxF, sin_BxTxF], axis=-1)[:, :, None, :]
        x = x_BxTxHxK
        if self.interleaved:  # pairs (2i, 2i + 1) to (i, i + K/2)
            x = jnp.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)
        return rotate(x, cos, sin)


def rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """``x * cos + rotate_half(x) * sin`` in ``x``'s dtype, where ``rotate_half`` swaps the
    halves of each head and negates the first: a product with a signed permutation matrix
    (exact: one nonzero term per output). ``x * cos`` is rounded to ``x``'s dtype before the
    sum, as transformers computes it in bf16; the sum is taken in float32.

    On a TPU the matrix unit does that product inside the fusion; split into halves instead,
    a 64-wide head is stored as 32-wide pieces, each padded to 128 lanes, in the forward and
    the backward pass."""
    matrix = rotate_half_matrix(x.shape[-1], x.dtype)
    swapped = jnp.einsum("...k,kj->...j", x, matrix, precision=exact_for(x.dtype))
    out = (x * cos.astype(x.dtype)).astype(jnp.float32) + swapped.astype(jnp.float32) * sin
    return out.astype(x.dtype)


def exact_for(dtype) -> jax.lax.Precision:
    """The matmul precision that keeps a product with a signed permutation exact: bf16 is
    exact at the default (one pass), float32 needs every pass on a TPU."""
    return jax.lax.Precision.DEFAULT if dtype == jnp.bfloat16 else jax.lax.Precision.HIGHEST


def rotate_half_matrix(head_dim: int, dtype) -> jax.Array:
    """R with ``x @ R == concatenate([-x[K/2:], x[:K/2]])`` for x of width K = head_dim."""
    half = head_dim // 2
    r = np.zeros((head_dim, head_dim), np.float32)
    r[np.arange(half) + half, np.arange(half)] = -1.0
    r[np.arange(half), np.arange(half) + half] = 1.0
    return jnp.asarray(r, dtype)
