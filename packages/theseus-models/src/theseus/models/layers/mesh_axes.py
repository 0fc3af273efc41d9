"""Mesh axes: which of them split a batch or a layer's heads, from the axis sizes of the
execution plan a layer is built with (``ExecutionPlan.mesh_axes``: context attention, the
experts' exchange, kernels run per shard decide their splits from it, never from the mesh in
context).

The placement of parameters is the exception: the layout a step is traced under
(``theseus.core.sharding.placement.Layout``) puts its mesh and parameter rules in context, and
``core.sharding.gathered.traced_param_spec`` / ``gathered_spec`` (and ``axis_size``, for the
operands of a projection) read them there to annotate where the values lie. Outside a step (evaluations, generation,
tests of one layer) there is no mesh: every axis has size 1.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
from jax.sharding import PartitionSpec
from theseus.core.sharding.gathered import traced_param_spec
from theseus.core.sharding.rules import BATCH_AXES, TENSOR_AXIS


def current_mesh() -> jax.sharding.AbstractMesh | None:
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh is None or mesh.empty else mesh


def axis_size(name: str) -> int:
    """How many devices the mesh axis ``name`` spans here (1 without a mesh or that axis)."""
    mesh = current_mesh()
    return 1 if mesh is None else int(dict(mesh.shape).get(name, 1))


def batch_axes(sizes: Mapping[str, int]) -> tuple[str, ...] | None:
    """The axes of a mesh of these ``sizes`` that split the rows of a batch (as the trainer
    lays them out), or None."""
    axes = tuple(a for a in BATCH_AXES if sizes.get(a, 1) > 1)
    return axes or None


def tensor_axis_for(sizes: Mapping[str, int], *dims: int) -> str | None:
    """``tensor`` when it splits (in a mesh of these ``sizes``) and divides every one of
    ``dims`` (heads), else None."""
    ways = sizes.get(TENSOR_AXIS, 1)
    return TENSOR_AXIS if ways > 1 and all(d % ways == 0 for d in dims) else None


def spec(*parts: str | tuple[str, ...] | None) -> PartitionSpec:
    return PartitionSpec(*parts)


def gathered_spec(
    shape: tuple[int, ...], logical: tuple[str | None, ...] | None
) -> PartitionSpec | None:
    """The layout of a parameter gathered over the batch axes (fsdp's split undone, a tensor
    split kept), where the step's layout splits it over any of them; else None."""
    split = None if logical is None else traced_param_spec(shape, logical)
    if split is None:
        return None
    kept = []
    for part in split:
        axes = part if isinstance(part, tuple) else (part,)
        rest = tuple(a for a in axes if a is not None and a not in BATCH_AXES)
        kept.append(rest[0] if len(rest) == 1 else (rest or None))
    whole = PartitionSpec(*kept)
    return None if whole == split else whole
