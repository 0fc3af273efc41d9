"""A dense layer whose kernel keeps the logical axes apart (e.g. embed x heads x head_dim)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.sharding.gathered import gathered, traced_param_spec
from theseus.core.sharding.placement import logical_axes
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.models.layers.mesh_axes import axis_size, gathered_spec


def contract(x: jax.Array, kernel: jax.Array, n_in: int) -> jax.Array:
    """``y[..., out] = sum_in x[..., in] * kernel[in, out]`` over the last ``n_in`` axes of x.

    The leading axes are merged into one row axis (a free reshape), and the kernel is
    contracted in its own shape: reshaped (embed x heads x head_dim as embed x (heads *
    head_dim)), a kernel split over fsdp was gathered a third time per layer in the backward
    for the attention projections, the forward's and the gradient's copies laid out apart
    (Llama 3.1 8B on v5p-8: 1.5 GiB more all-gather per step). Except when the sequence is
    split over ``context``: merging the batch and sequence axes would gather the sequence
    onto every device, so the leading axes stay apart.
    """
    lead = x.shape[: x.ndim - n_in]
    rows = x if axis_size(CONTEXT_AXIS) > 1 else x.reshape(math.prod(lead), *x.shape[len(lead) :])
    n_lead = rows.ndim - n_in
    dims = ((tuple(range(n_lead, rows.ndim)), tuple(range(n_in))), ((), ()))
    y = jax.lax.dot_general(rows, kernel, dims)
    return y.reshape(*lead, *kernel.shape[n_in:])


def param(value: jax.Array, axes: tuple[str | None, ...]) -> nnx.Param:
    """An f32 parameter carrying its logical axis names (``out_sharding`` metadata)."""
    assert value.ndim == len(axes), (value.shape, axes)
    return nnx.Param(value, out_sharding=axes, eager_sharding=False)


class Linear(nnx.Module):
    """``y[..., out] = sum_in x[..., in] * kernel[in, out] (+ bias[out])``.

    ``in_shape``/``out_shape`` are tuples, so attention projections keep heads and head_dim
    as separate kernel axes and need no reshapes. Compute happens in ``dtype``.

    ``gather``: where the step's layout splits the kernel over the batch axes (fsdp), gather
    it whole in ``dtype`` here, one copy per call that the recompute and the gradient's
    matmuls share, rather than leave the compiler to gather it for each matmul. The
    attention projections ask for it: their gradient's matmuls run after the attention
    kernel's backward, and XLA:TPU on a v5p torus gathered the query kernel and one of key
    and value a third time per layer rather than keep the recompute's copy (Llama 3.1 70B
    on v5p-256: 11 GiB of all-gather a step more than MaxText). The MLP's recompute and
    gradient are adjacent and stay with the compiler, which on an open v5p-64 mesh runs
    their gathers as windowed matmuls; gathered here too they cost 8B on v5p-64 a whole
    all-reduce of its gradient (59 against 49 GB on the links a step).
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
        gather: bool = False,
    ) -> None:
        shape = (*in_shape, *out_shape)
        self.kernel = param(std * jax.random.normal(rngs.params(), shape), (*in_axes, *out_axes))
        self.bias = param(jnp.zeros(out_shape), out_axes) if bias else None
        self.n_in = len(in_shape)
        self.dtype = dtype
        self.gather = gather

    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.kernel[...].astype(self.dtype)
        logical = logical_axes(self.kernel)
        whole = gathered_spec(kernel.shape, logical) if self.gather else None
        if whole is not None:
            kernel = gathered(kernel, whole, traced_param_spec(kernel.shape, logical or ()))
        y = contract(x.astype(self.dtype), kernel, self.n_in)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y
