"""Logical axis names -> mesh axes, one small table per strategy (no JAX).

Models name the axes of every parameter (``vocab``, ``embed``, ``heads``, ``kv_heads``,
``head_dim``, ``mlp``, ``experts``, ``latent``, ``layers``, or None); a strategy is a mapping
from those names to mesh axes, separately for parameters (and their gradients) and for
optimizer state. A name a table does not mention stays replicated. ``latent`` is the input
axis of the up-projections from a compressed latent (multi-head latent attention), kernels
without an ``embed`` axis that FSDP and ZeRO split along it instead. An array splits each
mesh axis once: along the first of its axes that a rule maps there.

``layers`` is the leading axis of parameters stacked over the transformer blocks (run under
a scan): every strategy keeps it whole, so each device holds its share of every layer and
the scan slices one layer at a time locally (FSDP gathers that layer's shards inside the
loop). Splitting it would be pipeline parallelism, which none of these strategies is.

=========  ================================  =========================================
strategy   parameters                        optimizer state (Adam moments, ...)
=========  ================================  =========================================
dp         replicated                        replicated
zero1      replicated                        embed, latent -> (data, fsdp, expert)
fsdp       embed, latent -> (fsdp, expert)   embed, latent -> (fsdp, expert)
tp         heads, kv_heads, mlp -> tensor    heads, kv_heads, mlp -> tensor
x + tp     the base's rules and tp's         the base's rules and tp's
=========  ================================  =========================================

Every table also sends ``experts`` (the leading axis of a mixture's stacked expert weights)
to the ``expert`` mesh axis: a no-op unless ``sharding.expert`` > 1 (``sharding.expert=0``,
the default, gives a mixture that axis: ``config.auto_experts``). FSDP and ZeRO split the
other parameters over it as well, so no gradient is all-reduced whole over it.

The batch is split over (data, fsdp, expert), its sequence over context, and replicated over
tensor: the expert axis carries data parallelism everywhere but inside the expert layers,
where tokens travel to the devices that hold their experts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from theseus.core.sharding.config import ShardingConfig, mesh_shape, parse_strategy

Rules = dict[str, tuple[str, ...]]

BATCH_AXES = ("data", "fsdp", "expert")  # the rows of a batch
CONTEXT_AXIS = "context"  # the positions of a sequence
EXPERT_AXIS = "expert"  # the experts of a mixture
TENSOR_AXIS = "tensor"  # heads and hidden widths

# FSDP splits over the expert axis too: outside the expert layers it is one more
# data-parallel axis, and a parameter it left whole would have its gradient all-reduced
# over it (an expert weight, whose ``experts`` axis takes ``expert`` first, is not split
# twice: an array uses each mesh axis once)
FSDP_AXES = ("fsdp", EXPERT_AXIS)

# named by every table: layers never split over the mesh, experts over the expert axis
REPLICATED: Rules = {"layers": (), "experts": (EXPERT_AXIS,)}

PARAM_RULES: dict[str, Rules] = {
    "dp": {**REPLICATED},
    "zero1": {**REPLICATED},
    "fsdp": {**REPLICATED, "embed": FSDP_AXES, "latent": FSDP_AXES},
    "tp": {**REPLICATED, "heads": ("tensor",), "kv_heads": ("tensor",), "mlp": ("tensor",)},
}

OPTIMIZER_RULES: dict[str, Rules] = {
    "dp": {**REPLICATED},
    "zero1": {**REPLICATED, "embed": ("data", *FSDP_AXES), "latent": ("data", *FSDP_AXES)},
    "fsdp": {**REPLICATED, "embed": FSDP_AXES, "latent": FSDP_AXES},
    "tp": PARAM_RULES["tp"],
}


@dataclass(frozen=True)
class StrategyRules:
    strategy: str
    params: Rules
    optimizer: Rules
    batch: tuple[str, ...] = BATCH_AXES


def rules_for(strategy: str) -> StrategyRules:
    """The parameter and optimizer-state rules of ``strategy`` (e.g. ``"fsdp+tp"``)."""
    base, tensor = parse_strategy(strategy)
    params = dict(PARAM_RULES[base])
    optimizer = dict(OPTIMIZER_RULES[base])
    if tensor:
        params.update(PARAM_RULES["tp"])
        optimizer.update(OPTIMIZER_RULES["tp"])
    return StrategyRules(strategy, params, optimizer)


def batch_ways(config: ShardingConfig, device_count: int, experts: int = 0) -> int:
    """Ways the mesh of ``config`` on ``device_count`` devices splits the batch of a model of
    ``experts`` routed experts (what
    :attr:`~theseus.core.sharding.placement.Layout.batch_shards` is once the mesh exists)."""
    sizes = mesh_shape(config, device_count, experts)
    return math.prod(sizes[axis] for axis in rules_for(config.strategy).batch)
