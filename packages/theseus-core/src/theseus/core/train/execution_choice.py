"""The run's :class:`~theseus.core.execution.ExecutionPlan`, put together once when the
setup is built: the attention kernel the model planned for the mesh's chips, the context
split and the expert routing the mesh implies, the remat level and the compute dtype with
the rule that chose it. The start-up log and ``--dry-run`` print it."""

from __future__ import annotations

from typing import Any

from theseus.core.execution import AttentionKernel, ContextSplit, ExecutionPlan, RematChoice
from theseus.core.sharding.config import ShardingConfig
from theseus.core.sharding.rules import BATCH_AXES
from theseus.core.train.configs import TrainJobConfig


def attention_kernel(planned: Any) -> AttentionKernel:
    """A model's ``plan_attention`` answer as a kernel: theseus-models' decoders return an
    :class:`AttentionKernel` with its block sizes; a plugin model may return just a name."""
    if isinstance(planned, AttentionKernel):
        return planned
    return AttentionKernel(name=str(planned))


def context_split(sharding: ShardingConfig, sizes: dict[str, int]) -> ContextSplit:
    ways = sizes.get("context", 1)
    if ways <= 1:
        return ContextSplit()
    return ContextSplit(sharding.context_attention, sharding.context_order, ways)


def expert_routing(sizes: dict[str, int], has_experts: bool) -> str:
    """How a mixture's tokens reach their experts on this mesh: all-to-all over ``expert``;
    else routed where they are when the mesh splits them (dropless layers; a layer with a
    capacity counts it over the whole batch), else over the whole batch."""
    if not has_experts:
        return "none (dense)"
    if sizes.get("expert", 1) > 1:
        return f"all_to_all over expert={sizes['expert']}"
    if any(sizes.get(axis, 1) > 1 for axis in (*BATCH_AXES, "context")):
        return "per_device (dropless layers; a capacity is counted over the whole batch)"
    return "global (one device's batch)"


def dtype_rule(config: TrainJobConfig, platform: str) -> str:
    if config.precision.compute_dtype:
        return "precision.compute_dtype"
    configured = getattr(config.model, "dtype", "")
    if configured == "auto":
        return f"model.dtype=auto on {platform}"
    return f"model.dtype={configured}"


def execution_plan(
    config: TrainJobConfig,
    sizes: dict[str, int],
    platform: str,
    planned_attention: Any,
    remat: RematChoice,
    compute_dtype: str,
    has_experts: bool,
) -> ExecutionPlan:
    return ExecutionPlan(
        attention=attention_kernel(planned_attention),
        context=context_split(config.sharding, sizes),
        experts=expert_routing(sizes, has_experts),
        remat=remat,
        compute_dtype=compute_dtype,
        dtype_rule=dtype_rule(config, platform),
    )
