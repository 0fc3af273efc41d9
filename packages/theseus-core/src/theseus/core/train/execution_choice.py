"""The run's :class:`~theseus.core.execution.ExecutionPlan`, decided once when the setup is
built, from the config, the mesh (its sizes and chips) and the model (asked, never changed):
the attention kernel for the mesh's chips, the context split and the expert routing the mesh
implies (refused where the model cannot split), and the compute dtype with the rule that
chose it (decided first: the model is asked the rest built in it). The remat level is decided after (``remat_choice``: it measures the model under
each level). The model is then built with the plan; the start-up log and ``--dry-run``
print it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from theseus.core.chips.moe_grouping import ExpertShape, choose_grouping
from theseus.core.execution import AttentionKernel, ContextSplit, ExecutionPlan, compute_dtype
from theseus.core.ranges import check_at_most
from theseus.core.sharding.config import ShardingConfig, ShardingError
from theseus.core.sharding.parallel import check_experts, expert_dimensions
from theseus.core.sharding.rules import BATCH_AXES
from theseus.core.sharding.sequence import check_sequence
from theseus.core.train.configs import TrainJobConfig


def attention_kernel(chosen: Any) -> AttentionKernel:
    """A model's ``choose_attention`` answer as a kernel: theseus-models' decoders return an
    :class:`AttentionKernel` with its block sizes; a plugin model may return just a name."""
    if isinstance(chosen, AttentionKernel):
        return chosen
    return AttentionKernel(name=str(chosen))


def context_split(sharding: ShardingConfig, sizes: dict[str, int]) -> ContextSplit:
    ways = sizes.get("context", 1)
    if ways <= 1:
        return ContextSplit()
    return ContextSplit(sharding.context_attention, sharding.context_order, ways)


def expert_routing(sizes: dict[str, int], has_experts: bool) -> str:
    """How a mixture's tokens reach their experts on this mesh (``EXPERT_ROUTES``)."""
    if not has_experts:
        return "none"
    if sizes.get("expert", 1) > 1:
        return "all_to_all"
    if any(sizes.get(axis, 1) > 1 for axis in (*BATCH_AXES, "context")):
        return "per_device"
    return "global"


def dispatch_capacity(
    routing: str, sharding: ShardingConfig, model_capacity: float, experts: int = 0
) -> tuple[float, str]:
    """The capacity factor the all-to-all dispatch is sized by, and the rule that chose it:
    the model's own ``capacity_factor`` where it has one, else ``sharding.expert_capacity``
    (0: dropless, slabs of every assignment). Only the all-to-all has one. A factor above
    the number of ``experts`` is refused: at that factor an expert can take every
    assignment, and more only sizes buffers past what the step can index."""
    if routing != "all_to_all":
        return 0.0, ""
    if model_capacity > 0:
        return model_capacity, f"model.capacity_factor={model_capacity:g}"
    chosen = float(sharding.expert_capacity)
    if experts:
        check_at_most(
            "sharding.expert_capacity", chosen, experts,
            "the model's experts: at that factor each expert can take every assignment",
        )  # fmt: skip
    return chosen, f"sharding.expert_capacity={chosen:g}, the model being dropless"


def dispatch_method(
    routing: str, sharding: ShardingConfig, platform: str, model_capacity: float
) -> tuple[str, str]:
    """How the all-to-all sends the tokens (``EXPERT_DISPATCHES``) and the rule that chose
    it. ``ragged`` sends exactly the assignments, where ``slabs`` pads each expert's to its
    capacity; XLA:CPU has no ragged-all-to-all, so a ragged dispatch asked for there runs
    the same exchange from an all-gather (``ragged_gathered``). A model with its own
    ``capacity_factor`` keeps its per-expert rule, which the slabs apply."""
    if routing != "all_to_all":
        return "slabs", ""
    asked = sharding.expert_dispatch
    if asked == "ragged" and model_capacity > 0:
        raise ShardingError(
            f"sharding.expert_dispatch=ragged: model.capacity_factor={model_capacity:g} caps "
            "each expert's rows, which only the slabs dispatch applies; use "
            "sharding.expert_dispatch=slabs, or model.capacity_factor=0"
        )
    if asked == "auto":
        if model_capacity > 0:
            return "slabs", "auto: the model caps each expert's rows"
        if platform != "tpu":
            return "slabs", f"auto on {platform}: ragged is measured on TPU"
        return "ragged", "auto on tpu, the model being dropless"
    if asked == "ragged" and platform == "cpu":
        return "ragged_gathered", "sharding.expert_dispatch=ragged on cpu"
    return asked, f"sharding.expert_dispatch={asked}"


def dtype_plan(config: TrainJobConfig, platform: str) -> ExecutionPlan:
    """The plan's first decision, made before the model is asked anything (its layers are
    built in it): the compute dtype on the mesh's ``platform``, by the one rule
    (``theseus.core.execution.compute_dtype``)."""
    dtype, rule = compute_dtype(config.model.dtype, platform, config.precision.compute_dtype)
    return ExecutionPlan(compute_dtype=dtype, dtype_rule=rule)


@dataclass(frozen=True)
class MeshFacts:
    """What the plan reads of a mesh: its axis sizes, its devices' platform and chip."""

    sizes: dict[str, int]
    platform: str = "cpu"
    device_kind: str = ""

    @classmethod
    def of(cls, layout: Any) -> MeshFacts:
        return cls(dict(layout.sizes), layout.platform, layout.device_kind)


def plan_execution(
    model: Any,
    sharding: ShardingConfig,
    mesh: MeshFacts,
    seq_len: int,
    name: str,
    base: ExecutionPlan | None = None,
    model_capacity: float = 0.0,
    grouping: str = "auto",
    expert_shape: ExpertShape | None = None,
) -> ExecutionPlan:
    """``base`` (its compute dtype: :func:`dtype_plan`) completed for ``model`` (abstract,
    built in ``base``) on ``mesh``; refuses, in one line, a split the model cannot run.
    ``model_capacity`` is the model's ``capacity_factor`` (0: dropless); ``grouping`` its
    ``moe_grouping`` (``auto``: chosen for the mesh's chips and ``expert_shape`` from the
    measured table, ``chips.moe_grouping``). The remat level is left for ``decide_remat``."""
    sizes = mesh.sizes
    experts = expert_dimensions(model)
    if sizes.get("expert", 1) > 1:
        check_experts(experts, sizes["expert"], name)
    context = context_split(sharding, sizes)
    if context.split:
        check_sequence(seq_len, context.ways, context.order)
    kernel = attention_kernel(
        model.choose_attention(
            seq_len,
            mesh.platform,
            mesh.device_kind,
            head_shards=sizes.get("tensor", 1),
            context=context,
        )
    )
    if context.split and kernel.context != context.method:
        raise ShardingError(
            f"sharding.context={context.ways}: model {name!r} has no attention layer that can "
            "split a sequence (choose_attention answered a kernel for whole sequences, as a "
            "model without attention does); use sharding.context=1"
        )
    routing = expert_routing(sizes, bool(experts))
    most = max(experts.values(), default=0)
    capacity, capacity_rule = dispatch_capacity(routing, sharding, model_capacity, most)
    dispatch, rule = dispatch_method(routing, sharding, mesh.platform, model_capacity)
    grouped, grouping_rule = (
        choose_grouping(grouping, mesh.platform, mesh.device_kind, expert_shape)
        if experts
        else ("tiles", "")
    )
    return replace(
        base or ExecutionPlan(),
        mesh_axes=tuple(sizes.items()),
        platform=mesh.platform,
        device_kind=mesh.device_kind,
        attention=kernel,
        context=context,
        experts=routing,
        expert_ways=sizes.get("expert", 1),
        expert_capacity=capacity,
        capacity_rule=capacity_rule,
        model_capacity=model_capacity if experts else 0.0,
        moe_grouping=grouped,
        grouping_rule=grouping_rule,
        expert_dispatch=dispatch,
        dispatch_rule=rule,
    )
