"""Token (and learned position) embeddings; ``attend`` is the tied output head."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec
from theseus.core.sharding.gathered import traced_param_spec
from theseus.core.sharding.placement import logical_axes
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.models.layers.kernel_sharding import batch_axes
from theseus.models.layers.linear import param
from theseus.models.layers.mesh_axes import axis_size, current_mesh


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def float32_logits(x: jax.Array, table_VxD: jax.Array, spec: str) -> jax.Array:
    """``einsum(spec, x, table)`` accumulated and returned in float32, differentiated in x's dtype.

    The loss wants float32 logits; left to autodiff, their float32 cotangent would turn both
    backward matmuls (the largest of a small model's step) into float32 ones, measured on an
    H200 at 17% of a GPT-124M step. Here the cotangent is cast to the compute dtype first, as
    every other layer's is; in float32 nothing changes.
    """
    return jnp.einsum(spec, x, table_VxD, preferred_element_type=jnp.float32)


def _logits_forward(x, table_VxD, spec):
    return float32_logits(x, table_VxD, spec), (x, table_VxD)


def _logits_backward(spec, saved, g):
    x, table_VxD = saved
    inputs, output = spec.split("->")
    x_axes, table_axes = inputs.split(",")
    g = g.astype(x.dtype)
    f32 = jnp.float32
    dx = jnp.einsum(f"{output},{table_axes}->{x_axes}", g, table_VxD, preferred_element_type=f32)
    dtable = jnp.einsum(f"{output},{x_axes}->{table_axes}", g, x, preferred_element_type=f32)
    return dx.astype(x.dtype), dtable.astype(table_VxD.dtype)


float32_logits.defvjp(_logits_forward, _logits_backward)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def lookup(
    table_VxD: jax.Array, ids: jax.Array, dtype: str, width_axes: tuple[str, ...]
) -> jax.Array:
    """``table[ids]`` in ``dtype``; its gradient is summed into a table of the table's dtype.

    ``width_axes``: the mesh axes the layout splits the table's width over (FSDP's). The
    gradient then travels from the batch's layout (rows split) to the table's (width split)
    as an all-to-all; left to autodiff, the cotangent is cast to float32 first and that
    all-to-all moves twice the bytes (Llama 3.1 8B on v5p-8: 0.25 GiB, against MaxText's
    0.125). Here it is resharded in ``dtype`` and cast on arrival: the same sums, in float32.
    """
    return jnp.take(table_VxD, ids, axis=0).astype(dtype)


def _lookup_forward(table_VxD, ids, dtype, width_axes):
    return lookup(table_VxD, ids, dtype, width_axes), (table_VxD, ids)


def _lookup_backward(dtype, width_axes, saved, g_BxTxD):
    table_VxD, ids = saved
    mesh = current_mesh()
    if width_axes and mesh is not None and g_BxTxD.ndim == 3:
        rows, positions, _ = g_BxTxD.shape
        split = batch_axes(dict(mesh.shape), rows) or None
        context = CONTEXT_AXIS if axis_size(CONTEXT_AXIS) > 1 and positions > 1 else None
        constrain = jax.lax.with_sharding_constraint
        g_BxTxD = constrain(g_BxTxD, PartitionSpec(split, context, None))  # where it is
        g_BxTxD = constrain(g_BxTxD, PartitionSpec(None, None, width_axes))  # where it goes
    updates = g_BxTxD.astype(table_VxD.dtype)
    return jnp.zeros_like(table_VxD).at[ids].add(updates), None


lookup.defvjp(_lookup_forward, _lookup_backward)


def width_axes(table_VxD: jax.Array, axes: tuple[str | None, ...]) -> tuple[str, ...]:
    """The mesh axes the layout in context splits the table's width (only) over."""
    spec = traced_param_spec(table_VxD.shape, axes)
    if spec is None or len(spec) < 2 or spec[0] is not None or spec[1] is None:
        return ()
    return (spec[1],) if isinstance(spec[1], str) else tuple(spec[1])


class Embedding(nnx.Module):
    def __init__(
        self,
        num: int,
        dim: int,
        *,
        axes: tuple[str | None, str | None] = ("vocab", "embed"),
        std: float = 0.02,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.embedding = param(std * jax.random.normal(rngs.params(), (num, dim)), axes)
        self.dtype = dtype

    def __call__(self, ids: jax.Array) -> jax.Array:
        table = self.embedding[...]
        axes = logical_axes(self.embedding)
        spread = width_axes(table, axes) if axes is not None else ()
        return lookup(table, ids, jnp.dtype(self.dtype).name, spread)

    def attend(self, x_BxTxD: jax.Array) -> jax.Array:
        """Logits against every row, accumulated and returned in float32."""
        table = self.embedding[...].astype(self.dtype)
        if axis_size(CONTEXT_AXIS) > 1:  # the sequence is split: keep (batch, sequence) apart
            return float32_logits(x_BxTxD, table, "btd,vd->btv")
        x_NxD = x_BxTxD.reshape(-1, x_BxTxD.shape[-1])
        logits = float32_logits(x_NxD, table, "nd,vd->nv")
        return logits.reshape(*x_BxTxD.shape[:-1], table.shape[0])
