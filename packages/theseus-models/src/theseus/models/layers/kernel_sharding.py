"""Attention kernels run per shard of the step's mesh, under ``jax.shard_map``.

A Pallas Mosaic kernel (TPU splash) cannot be partitioned by the compiler ("Mosaic kernels
cannot be automatically partitioned"), so on a mesh it runs inside ``jax.shard_map``: each
device attends over its own rows (the batch split over the mesh's batch axes, ``data`` and
``fsdp``) and, under tensor parallelism, its own heads (over ``tensor``). Attention never
mixes rows or heads, so no communication is needed; segment ids travel with their rows, and
grouped heads stay grouped because query and key/value heads are split the same number of
ways (query head h uses kv head h // R, and a shard of H / n query heads holds exactly the
R-groups of its G / n kv heads). cuDNN's fused attention goes the same way, for a layout
that does not depend on its partitioning rules.

The mesh's axes and sizes come from the layer's execution plan (``ExecutionPlan.mesh_axes``);
``jax.shard_map`` binds them to the mesh the step is traced under (``jax.set_mesh``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import PartitionSpec
from theseus.core.sharding.rules import BATCH_AXES

HEAD_AXIS = "tensor"


def batch_axes(sizes: Mapping[str, int], rows: int) -> tuple[str, ...]:
    """The batch axes (size > 1) of a mesh of these ``sizes`` that split ``rows`` evenly, in
    order."""
    chosen: list[str] = []
    for axis in BATCH_AXES:
        ways = sizes.get(axis, 1)
        if ways > 1 and rows % (math.prod(sizes[a] for a in chosen) * ways) == 0:
            chosen.append(axis)
    return tuple(chosen)


def head_axis(sizes: Mapping[str, int], n_heads: int, n_kv_heads: int) -> str | None:
    ways = sizes.get(HEAD_AXIS, 1)
    if ways > 1 and n_heads % ways == 0 and n_kv_heads % ways == 0:
        return HEAD_AXIS
    return None


def per_shard(
    kernel: Callable[..., jax.Array],
    sizes: Mapping[str, int],
    q_BxHxTxK: jax.Array,
    k_BxGxSxK: jax.Array,
    v_BxGxSxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxS: jax.Array,
) -> jax.Array:
    """``kernel(q, k, v, q_segment, k_segment)`` on each device's rows and heads, BxHxTxK, on
    a mesh of these axis ``sizes`` (the execution plan's).

    Without a mesh (one device, or a model used outside a step: empty ``sizes``) the kernel
    runs on the whole arrays. Rows or heads the mesh does not divide stay whole on every
    device of that axis (the same result, computed there more than once).
    """
    if math.prod(sizes.values()) <= 1:
        return kernel(q_BxHxTxK, k_BxGxSxK, v_BxGxSxK, q_segment_BxT, k_segment_BxS)
    rows = batch_axes(sizes, q_BxHxTxK.shape[0])
    heads = head_axis(sizes, q_BxHxTxK.shape[1], k_BxGxSxK.shape[1])
    batch = (rows if len(rows) > 1 else rows[0]) if rows else None
    per_head = PartitionSpec(batch, heads)
    per_row = PartitionSpec(batch)
    sharded = jax.shard_map(
        kernel,
        in_specs=(per_head, per_head, per_head, per_row, per_row),
        out_specs=per_head,
        check_vma=False,  # Pallas calls carry no varying-axes types
    )
    return sharded(q_BxHxTxK, k_BxGxSxK, v_BxGxSxK, q_segment_BxT, k_segment_BxS)


def per_shard_decode(
    kernel: Callable[..., jax.Array],
    sizes: Mapping[str, int],
    q_BxHxK: jax.Array,
    k_LxBxSxW: jax.Array,
    v_LxBxSxW: jax.Array,
    layer: jax.Array | int,
    end: jax.Array,
    first_B: jax.Array,
    kv_heads: int,
) -> jax.Array:
    """``kernel(q, k, v, layer, end, first)`` of a decoding step (one query per row against
    the layer-stacked cache, ``layers/decode_attention.py``) on each device's rows, BxHxV,
    on a mesh of these axis ``sizes`` (the execution plan's); the layer and fill index are
    the same everywhere. A cache keeps each position's kv heads side by side, so splitting
    its last axis over ``tensor`` splits the heads (G / n each, with their R-groups of query
    heads)."""
    args = (q_BxHxK, k_LxBxSxW, v_LxBxSxW, jax.numpy.asarray(layer), end, first_B)
    if math.prod(sizes.values()) <= 1:
        return kernel(*args)
    cache, rows, heads = cache_specs(sizes, q_BxHxK.shape[0], q_BxHxK.shape[1], kv_heads)
    sharded = jax.shard_map(
        kernel,
        in_specs=(
            PartitionSpec(rows, heads),
            cache,
            cache,
            PartitionSpec(),
            PartitionSpec(),
            PartitionSpec(rows),
        ),
        out_specs=PartitionSpec(rows, heads),
        check_vma=False,  # Pallas calls carry no varying-axes types
    )
    return sharded(*args)


def cache_specs(
    sizes: Mapping[str, int], rows: int, n_heads: int, kv_heads: int
) -> tuple[PartitionSpec, Any, str | None]:
    """How a layer-stacked cache (LxBxSx(G*K)) of ``rows`` rows is split on a mesh of these
    ``sizes``: its rows over the batch axes that divide them, its heads over ``tensor`` when
    both head counts divide; and the rows' and heads' axes."""
    axes = batch_axes(sizes, rows)
    batch = (axes if len(axes) > 1 else axes[0]) if axes else None
    heads = head_axis(sizes, n_heads, kv_heads)
    return PartitionSpec(None, batch, None, heads), batch, heads
