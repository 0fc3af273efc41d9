"""Attention kernels run per shard of the mesh in context, under ``jax.shard_map``.

A Pallas Mosaic kernel (TPU splash) cannot be partitioned by the compiler ("Mosaic kernels
cannot be automatically partitioned"), so on a mesh it runs inside ``jax.shard_map``: each
device attends over its own rows (the batch split over the mesh's batch axes, ``data`` and
``fsdp``) and, under tensor parallelism, its own heads (over ``tensor``). Attention never
mixes rows or heads, so no communication is needed; segment ids travel with their rows, and
grouped heads stay grouped because query and key/value heads are split the same number of
ways (query head h uses kv head h // R, and a shard of H / n query heads holds exactly the
R-groups of its G / n kv heads). cuDNN's fused attention goes the same way, for a layout
that does not depend on its partitioning rules.

The mesh is the one in context (``jax.set_mesh``, which a training setup's steps are traced
under): the kernels read it at trace time from ``jax.sharding.get_abstract_mesh()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import PartitionSpec
from theseus.core.sharding.rules import BATCH_AXES

HEAD_AXIS = "tensor"


def context_mesh() -> Any | None:
    """The abstract mesh in context, or None (no mesh, or already inside a shard_map)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.manual_axes:
        return None
    return mesh


def context_platform() -> tuple[str, str, int]:
    """(platform, device kind, head shards) of the mesh in context, else the default
    backend's (with one head shard): what a kernel traced now will compile for."""
    mesh = context_mesh()
    device = getattr(mesh, "abstract_device", None) if mesh is not None else None
    if mesh is None or device is None:
        return jax.default_backend(), "", 1
    return device.platform, device.device_kind, dict(mesh.shape).get(HEAD_AXIS, 1)


def batch_axes(mesh: Any, rows: int) -> tuple[str, ...]:
    """The mesh's batch axes (size > 1) that split ``rows`` evenly, in order."""
    sizes = dict(mesh.shape)
    chosen: list[str] = []
    for axis in BATCH_AXES:
        ways = sizes.get(axis, 1)
        if ways > 1 and rows % (math.prod(sizes[a] for a in chosen) * ways) == 0:
            chosen.append(axis)
    return tuple(chosen)


def head_axis(mesh: Any, n_heads: int, n_kv_heads: int) -> str | None:
    ways = dict(mesh.shape).get(HEAD_AXIS, 1)
    if ways > 1 and n_heads % ways == 0 and n_kv_heads % ways == 0:
        return HEAD_AXIS
    return None


def per_shard(
    kernel: Callable[..., jax.Array],
    q_BxHxTxK: jax.Array,
    k_BxGxSxK: jax.Array,
    v_BxGxSxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxS: jax.Array,
) -> jax.Array:
    """``kernel(q, k, v, q_segment, k_segment)`` on each device's rows and heads, BxHxTxK.

    Without a mesh in context (one device, or a model used outside a setup) the kernel runs
    on the whole arrays. Rows or heads the mesh does not divide stay whole on every device
    of that axis (the same result, computed there more than once).
    """
    mesh = context_mesh()
    if mesh is None or mesh.size == 1:
        return kernel(q_BxHxTxK, k_BxGxSxK, v_BxGxSxK, q_segment_BxT, k_segment_BxS)
    rows = batch_axes(mesh, q_BxHxTxK.shape[0])
    heads = head_axis(mesh, q_BxHxTxK.shape[1], k_BxGxSxK.shape[1])
    batch = (rows if len(rows) > 1 else rows[0]) if rows else None
    per_head = PartitionSpec(batch, heads)
    per_row = PartitionSpec(batch)
    sharded = jax.shard_map(
        kernel,
        mesh=mesh,
        in_specs=(per_head, per_head, per_head, per_row, per_row),
        out_specs=per_head,
        check_vma=False,  # Pallas calls carry no varying-axes types
    )
    return sharded(q_BxHxTxK, k_BxGxSxK, v_BxGxSxK, q_segment_BxT, k_segment_BxS)


def per_shard_decode(
    kernel: Callable[..., jax.Array],
    q_BxHxK: jax.Array,
    k_LxBxSxW: jax.Array,
    v_LxBxSxW: jax.Array,
    layer: Any,
    end: jax.Array,
    first_B: jax.Array,
    kv_heads: int,
) -> jax.Array:
    """``kernel(q, k, v, layer, end, first)`` of a decoding step (one query per row against
    the layer-stacked cache, ``layers/decode_attention.py``) on each device's rows, BxHxV;
    the layer and fill index are the same everywhere. A cache keeps each position's kv heads
    side by side, so splitting its last axis over ``tensor`` splits the heads (G / n each,
    with their R-groups of query heads)."""
    args = (q_BxHxK, k_LxBxSxW, v_LxBxSxW, jax.numpy.asarray(layer), end, first_B)
    mesh = context_mesh()
    if mesh is None or mesh.size == 1:
        return kernel(*args)
    rows = batch_axes(mesh, q_BxHxK.shape[0])
    batch = (rows if len(rows) > 1 else rows[0]) if rows else None
    heads = head_axis(mesh, q_BxHxK.shape[1], kv_heads)
    cache = PartitionSpec(None, batch, None, heads)
    sharded = jax.shard_map(
        kernel,
        mesh=mesh,
        in_specs=(
            PartitionSpec(batch, heads),
            cache,
            cache,
            PartitionSpec(),
            PartitionSpec(),
            PartitionSpec(batch),
        ),
        out_specs=PartitionSpec(batch, heads),
        check_vma=False,  # Pallas calls carry no varying-axes types
    )
    return sharded(*args)
