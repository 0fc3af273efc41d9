"""Context and expert parallelism, checked against the model and handed to it at set-up.

``sharding.context`` > 1 splits every sequence over the ``context`` axis. Only attention
mixes positions, so only attention layers need to know: every module of the model that
offers ``split_sequence(method, order)`` (the attention layers of theseus-models) is told the
method (``sharding.context_attention``) and the sequence layout (``sharding.context_order``)
once, here; the setting lives in the model's graph definition, static in the step. A model
with no such module cannot split its sequences and is refused.

``sharding.expert`` > 1 splits a mixture's experts over the ``expert`` axis. Parameters name
their expert dimension ``experts`` (logical axis), the rules send it to that axis, and the
expert layers find the axis in the mesh at trace time. A model without such parameters (a
dense model) or whose expert count the axis does not divide is refused.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from theseus.core.sharding.config import ShardingConfig, ShardingError
from theseus.core.sharding.placement import logical_axes, path_name, per_device_bytes
from theseus.core.sharding.sequence import check_sequence

EXPERTS = "experts"  # the logical axis of a mixture's expert dimension


def prepare_model(
    model: Any, config: ShardingConfig, sizes: dict[str, int], seq_len: int, name: str
) -> None:
    """Refuse what the mesh cannot split; hand the context split to the attention layers."""
    if sizes.get("expert", 1) > 1:
        check_experts(model, sizes["expert"], name)
    if sizes.get("context", 1) > 1:
        check_sequence(seq_len, sizes["context"], config.context_order)
        split_sequences(model, config, sizes["context"], name)


def split_sequences(model: Any, config: ShardingConfig, devices: int, name: str) -> None:
    found = 0
    for _, module in nnx.iter_graph(model):
        split = getattr(module, "split_sequence", None)
        if callable(split):
            split(config.context_attention, config.context_order)
            found += 1
    if not found:
        raise ShardingError(
            f"sharding.context={devices}: model {name!r} has no attention layer that can split "
            "a sequence (a split_sequence method, as theseus-models' Attention has); use "
            "sharding.context=1"
        )


def expert_dimensions(model: Any) -> dict[str, int]:
    """``{parameter path: size of its experts dimension}`` of every expert parameter."""
    found = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        axes = logical_axes(variable)
        if axes and EXPERTS in axes:
            shape = np.shape(variable.get_value())
            found[path_name(path)] = int(shape[axes.index(EXPERTS)])
    return found


def check_experts(model: Any, devices: int, name: str) -> None:
    dims = expert_dimensions(model)
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
