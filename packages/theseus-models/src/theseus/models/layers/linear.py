"""A dense layer whose kernel keeps the logical axes apart (e.g. embed x heads x head_dim)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx


def param(value: jax.Array, axes: tuple[str | None, ...]) -> nnx.Param:
    """An f32 parameter carrying its logical axis names (``out_sharding`` metadata)."""
    assert value.ndim == len(axes), (value.shape, axes)
    return nnx.Param(value, out_sharding=axes, eager_sharding=False)


class Linear(nnx.Module):
    """``y[..., out] = sum_in x[..., in] * kernel[in, out] (+ bias[out])``.

    ``in_shape``/``out_shape`` are tuples, so attention projections keep heads and head_dim
    as separate kernel axes and need no reshapes. Compute happens in ``dtype``.
    """

    def __init__(
        self,
        in_shape: tuple[int, ...],
        out_shape: tuple[int, ...],
        in_axes: tuple[str, ...],
        out_axes: tuple[str, ...],
        *,
        bias: bool = False,
        std: float = 0.02,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        shape = (*in_shape, *out_shape)
        self.kernel = param(std * jax.random.normal(rngs.params(), shape), (*in_axes, *out_axes))
        self.bias = param(jnp.zeros(out_shape), out_axes) if bias else None
        self.n_in = len(in_shape)
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        # As one 2-D matmul (N x in) @ (in x out): the reshapes are free, and XLA then needs no
        # activation transposes for the kernel gradient (a 3-D dot_general gets several).
        n = self.n_in
        kernel = self.kernel[...].astype(self.dtype)
        lead, out_shape = x.shape[: x.ndim - n], kernel.shape[n:]
        x2 = x.astype(self.dtype).reshape(math.prod(lead), -1)
        y = (x2 @ kernel.reshape(x2.shape[1], -1)).reshape(*lead, *out_shape)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y
