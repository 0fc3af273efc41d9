"""Expert parallelism, checked against the model's parameters.

``sharding.expert`` > 1 splits a mixture's experts over the ``expert`` axis. Parameters name
their expert dimension ``experts`` (logical axis) and the rules send it to that axis; the
execution plan (``theseus.core.execution``) tells the expert layers to route all-to-all. A
model without such parameters (a dense model) or whose expert count the axis does not divide
is refused. (``sharding.context`` > 1 reaches the attention layers the same way, through the
plan: ``train/execution_choice.py``.)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from theseus.core.sharding.config import ShardingError
from theseus.core.sharding.placement import logical_axes, path_name, per_device_bytes

EXPERTS = "experts"  # the logical axis of a mixture's expert dimension


def expert_dimensions(model: Any) -> dict[str, int]:
    """``{parameter path: size of its experts dimension}`` of every expert parameter."""
    found = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        axes = logical_axes(variable)
        if axes and EXPERTS in axes:
            shape = np.shape(variable.get_value())
            found[path_name(path)] = int(shape[axes.index(EXPERTS)])
    return found


def check_experts(dims: dict[str, int], devices: int, name: str) -> None:
    """Refuse an ``expert`` axis of ``devices`` for a model whose expert parameters (``dims``:
    :func:`expert_dimensions`) it cannot split, or a dense one."""
    if not dims:
        raise ShardingError(
            f"sharding.expert={devices}: model {name!r} has no experts (no parameter with an "
            f"'{EXPERTS}' axis); expert parallelism is for mixture-of-experts models such as "
            "qwen3_moe: use sharding.expert=1"
        )
    for path, count in dims.items():
        if count % devices:
            raise ShardingError(
                f"sharding.expert={devices} does not divide the {count} experts of {path}: "
                f"use a divisor of {count}"
            )


def expert_parameter_bytes(params: Any) -> int:
    """Bytes one device holds of the parameters with an ``experts`` axis (abstract or real
    arrays carrying shardings)."""
    leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
    chosen = [
        leaf.get_value()
        for leaf in leaves
        if isinstance(leaf, nnx.Variable) and EXPERTS in (logical_axes(leaf) or ())
    ]
    return per_device_bytes(chosen)
