"""The chunked loss run on each device's rows, the output head gathered by hand.

Under fsdp the head's (embed x vocab) table is split over the batch axes. ``head_gather``
makes it whole with a sharding constraint before the chunked loss's scan; the compiler then
sums its gradient with one all-reduce of the whole table and slices it (Llama 3.1 8B on
v5p-64: 1 GiB of bf16 a step, moving twice that over the links). Asked to keep that gradient
split instead, the compiler resolves each piece's partial sum at its own matmul: a
reduce-scatter per piece inside the scan.

Here the loss runs inside ``jax.shard_map`` over the batch axes: each device gathers the
table's shards itself (``all_gather``, in the compute dtype), runs the pieces of its own rows
one at a time, and the pieces' sums meet once, in the gather's transpose after the scan, a
reduce-scatter: half the link bytes of the all-reduce. The loss is the same sum (the pieces'
totals added over the devices).

That reduce-scatter is written as a ring of permutes (``ring_reduce_scatter``), not
``psum_scatter``: XLA:TPU's reduce-scatter decomposer turns a standalone reduce-scatter of a
table this size back into an all-reduce and a slice (compiled for v5p-8 with a 64 x 151,936
table: kept when the vocabulary is a multiple of 2,048, decomposed otherwise; on v5p-64
decomposed even at 131,072). The permutes are what XLA:TPU itself makes of the layers'
gradients (its windowed matmuls), and they carry (n - 1) / n of the table, as a
reduce-scatter does: Llama 3.1 8B on v5p-64 moves 41.6 GiB over the links a step with them
against 42.6 with the all-reduce (MaxText: 41.8).

A step not traced on a mesh with batch axes, a sequence split over ``context`` or a table
split over an axis other than the batch axes takes ``head_gather``'s way (``None`` here).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec
from theseus.core.sharding.placement import logical_axes, spec_for
from theseus.core.sharding.rules import BATCH_AXES, CONTEXT_AXIS
from theseus.core.sharding.traced_rules import param_rules
from theseus.core.train.chunked_loss import chunked_cross_entropy
from theseus.core.train.head_gather import VOCAB


def per_shard_cross_entropy(
    model: Any,
    hidden_BxTxD: jax.Array,
    targets_BxT: jax.Array,
    mask_BxT: jax.Array,
    chunks: int,
) -> jax.Array | None:
    """``chunked_cross_entropy`` of ``model.head`` on each device's rows, summed over the
    devices; None where the step's layout does not allow it (see the module's docstring)."""
    mesh, rules = jax.sharding.get_abstract_mesh(), param_rules()
    if mesh is None or mesh.empty or rules is None:
        return None
    sizes = dict(mesh.shape)
    batch = tuple(a for a in BATCH_AXES if sizes.get(a, 1) > 1)
    ways = math.prod(sizes[a] for a in batch)
    if not batch or sizes.get(CONTEXT_AXIS, 1) > 1 or hidden_BxTxD.shape[0] % ways:
        return None
    graphdef, tables, others = nnx.split(model, has_vocab_axis, ...)  # type: ignore[misc]
    flat = list(nnx.to_flat_state(tables))
    read = read_by_head(graphdef, flat, others, hidden_BxTxD)
    used = [entry for entry, is_read in zip(flat, read, strict=True) if is_read]
    unused = [entry for entry, is_read in zip(flat, read, strict=True) if not is_read]
    found = [table_spec(variable, rules, sizes) for _, variable in used]
    specs = tuple(spec for spec in found if spec is not None)
    if not used or len(specs) < len(found):
        return None
    dtype = getattr(model, "dtype", None)
    rows = PartitionSpec(batch)

    def local(values: list[jax.Array], h: jax.Array, t: jax.Array, m: jax.Array) -> jax.Array:
        parts = [varying(cast(v, dtype), batch) for v in values]
        whole, h = gathered_before(specs, parts, h)
        gathered = [(path, var.replace(w)) for (path, var), w in zip(used, whole, strict=True)]
        # the other parameters stay outside, unread: the head reads only its tables
        tables = nnx.from_flat_state([*gathered, *unused])
        inner = nnx.merge(graphdef, tables, others)
        return jax.lax.psum(chunked_cross_entropy(inner.head, h, t, m, chunks), batch)

    sharded = jax.shard_map(
        local,
        in_specs=(list(specs), rows, rows, rows),
        out_specs=PartitionSpec(),
        axis_names=set(batch),
    )
    values = [variable.get_value() for _, variable in used]
    return sharded(values, hidden_BxTxD, targets_BxT, mask_BxT)


def read_by_head(graphdef: Any, flat: list, others: Any, hidden_BxTxD: jax.Array) -> list[bool]:
    """Which of the tables in ``flat`` the model's head reads (an untied input embedding has
    a ``vocab`` axis too): traced on one position, nothing computed."""

    def head(values: list[jax.Array]) -> jax.Array:
        tables = [(path, var.replace(v)) for (path, var), v in zip(flat, values, strict=True)]
        return nnx.merge(graphdef, nnx.from_flat_state(tables), others).head(hidden_BxTxD[:1, :1])

    jaxpr = jax.make_jaxpr(head)([variable.get_value() for _, variable in flat]).jaxpr
    read = {x for eqn in jaxpr.eqns for x in eqn.invars if not hasattr(x, "val")}
    read.update(x for x in jaxpr.outvars if not hasattr(x, "val"))
    return [x in read for x in jaxpr.invars]


def has_vocab_axis(_path: Any, node: Any) -> bool:
    """Whether ``node`` is a parameter with a ``vocab`` axis (the head's, the embedding's)."""
    axes = logical_axes(node) if isinstance(node, nnx.Param) else None
    return axes is not None and VOCAB in axes


def table_spec(
    variable: Any, rules: dict[str, tuple[str, ...]], sizes: dict[str, int]
) -> PartitionSpec | None:
    """How the layout splits a table; None when over an axis other than the batch axes."""
    spec = spec_for("the head", variable.get_value().shape, logical_axes(variable), rules, sizes)
    split = {a for _, axes in split_dims(spec) for a in axes}
    return None if split - set(BATCH_AXES) else spec


def cast(value: jax.Array, dtype: Any) -> jax.Array:
    """``value`` in the compute dtype (on the shard, before the gather: half the bytes)."""
    if dtype is None or not jnp.issubdtype(value.dtype, jnp.floating):
        return value
    return value.astype(dtype)


def varying(value: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """``value`` typed as varying over every one of ``axes``: a table kept whole over one
    (``data``) has its gradient summed over it, in the transpose of this cast."""
    missing = tuple(a for a in axes if a not in jax.typeof(value).mat.varying)
    return jax.lax.pcast(value, missing, to="varying") if missing else value


def gather(value: jax.Array, spec: PartitionSpec) -> jax.Array:
    """``value``'s shard made whole along every dimension ``spec`` splits."""
    for dim, axes in split_dims(spec):
        value = jax.lax.all_gather(value, axes, axis=dim, tiled=True)
    return value


def split_dims(spec: PartitionSpec) -> list[tuple[int, tuple[str, ...]]]:
    """Each dimension ``spec`` splits, with its mesh axes."""
    return [
        (dim, part if isinstance(part, tuple) else (part,)) for dim, part in enumerate(spec) if part
    ]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def gathered_before(
    specs: tuple[PartitionSpec, ...], parts: list[jax.Array], h: jax.Array
) -> tuple[list[jax.Array], jax.Array]:
    """The tables' shards made whole (``gather``), and ``h`` as it is. In the backward pass
    the tables' gradients are summed over the devices (``ring_reduce_scatter``) before
    ``h``'s gradient leaves: the layers' backward loop then starts after the sum, without
    the whole-table gradients alive beside it (Llama 3.1 70B: 2 GiB each)."""
    return [gather(p, spec) for p, spec in zip(parts, specs, strict=True)], h


def _gathered_before_fwd(
    specs: tuple[PartitionSpec, ...], parts: list[jax.Array], h: jax.Array
) -> tuple[tuple[list[jax.Array], jax.Array], None]:
    return gathered_before(specs, parts, h), None


def _gathered_before_bwd(
    specs: tuple[PartitionSpec, ...], _: None, cotangents: tuple[list[jax.Array], jax.Array]
) -> tuple[list[jax.Array], jax.Array]:
    wholes, dh = cotangents
    summed = []
    for gradient, spec in zip(wholes, specs, strict=True):
        for dim, axes in reversed(split_dims(spec)):
            gradient = ring_reduce_scatter(gradient, axes, dim)
        summed.append(gradient)
    return jax.lax.optimization_barrier((summed, dh))


gathered_before.defvjp(_gathered_before_fwd, _gathered_before_bwd)


def ring_reduce_scatter(x: jax.Array, axes: tuple[str, ...], dim: int) -> jax.Array:
    """``psum_scatter(x, axes, scatter_dimension=dim, tiled=True)`` as a ring of permutes:
    in step s each device passes its running sum of one slice to the previous device and
    adds its own part of the next, so after n - 1 steps device i holds slice i summed."""
    n = math.prod(jax.lax.axis_size(a) for a in axes)
    size = x.shape[dim] // n
    me = jax.lax.axis_index(axes)
    left = [(j, (j - 1) % n) for j in range(n)]

    def part(k: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice_in_dim(x, (k % n) * size, size, axis=dim)

    def step(s: int, running: jax.Array) -> jax.Array:
        return jax.lax.ppermute(running, axes, left) + part(me + s + 1)

    return jax.lax.fori_loop(1, n, step, part(me + 1))
