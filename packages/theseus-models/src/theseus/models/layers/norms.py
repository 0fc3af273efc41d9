"""LayerNorm and RMSNorm, computed in float32 and returned in the compute dtype."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.layers.linear import param


class RMSNorm(nnx.Module):
    """``x / sqrt(mean(x^2) + eps) * (offset + scale)`` over the last axis.

    ``offset=1`` is Gemma's parametrisation (the stored gain is 1 less than the one applied,
    and starts at 0); the gain applied starts at 1 either way.
    """

    def __init__(
        self,
        dim: int,
        *,
        eps: float = 1e-6,
        axis_name: str = "embed",
        offset: float = 0.0,
        dtype=jnp.float32,
    ) -> None:
        self.scale = param(jnp.full((dim,), 1.0 - offset), (axis_name,))
        self.eps = eps
        self.offset = offset
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        gain = self.scale[...] + self.offset if self.offset else self.scale[...]
        return (y * gain).astype(self.dtype)


class LayerNorm(nnx.Module):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis."""

    def __init__(
        self,
        dim: int,
        *,
        eps: float = 1e-5,
        bias: bool = True,
        axis_name: str = "embed",
        dtype=jnp.float32,
    ) -> None:
        self.scale = param(jnp.ones((dim,)), (axis_name,))
        self.bias = param(jnp.zeros((dim,)), (axis_name,)) if bias else None
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        centred = x32 - mean
        var = jnp.mean(centred * centred, axis=-1, keepdims=True)
        y = centred * jax.lax.rsqrt(var + self.eps) * self.scale[...]
        if self.bias is not None:
            y = y + self.bias[...]
        return y.astype(self.dtype)
