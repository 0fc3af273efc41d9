"""How a step runs, decided once: the :class:`ExecutionPlan` a model is built with.

The training setup decides it from the config, the mesh, the model and the chip
(``theseus.core.train.execution_choice``), builds the model with it
(``Model(config, rngs=..., execution=plan)``), logs it and prints it in ``--dry-run``. It
is a frozen, hashable value, a static part of the model's graph definition: no layer asks
the ambient mesh or the backend what to run, and no model is changed after it is built.

* ``attention``: the kernel every attention layer runs, with its block sizes;
* ``context``: how a sequence split over the ``context`` axis attends (ring in an order,
  all-gather, or not split);
* ``experts``: how a mixture routes its tokens (all-to-all over ``expert``, on each device,
  or over the whole batch), and for the all-to-all the capacity factor its dispatch is sized
  by (``expert_capacity``; 0, the default: dropless) and how it sends them
  (``expert_dispatch``: fixed slabs, or ragged: exactly the assignments); elsewhere the
  model's own capacity factor (``model_capacity``; 0: dropless);
* ``remat``: what the backward pass recomputes, and why (each block runs through
  ``theseus.core.sharding.remat.checkpointed`` at its level);
* ``compute_dtype``: the dtype the model computes in, and the rule that chose it;
* ``mesh_axes``, ``platform``, ``device_kind``: the mesh the step runs on (its axes and their
  sizes, in order) and its chips: what a layer that splits its work over the mesh (context
  attention, the experts' exchange, a kernel run per shard) needs to know of it.

Layers are built with the plan (each takes it in its constructor) and read nothing else about
where they run: no mesh in context, no backend, while they are traced. ``unsplit`` is the
same plan for whole arrays on one device (a model used outside the step: evaluations, time
travel, generation).

No JAX here: a leaf module that configs, plugins and the dry run may import.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field, replace

EXPERT_ROUTES = {
    "none": "no experts (a dense model)",
    "all_to_all": "experts split over the expert axis, tokens sent to them all-to-all",
    "per_device": "each device routes its own tokens (dropless layers; a capacity is "
    "counted over the whole batch)",
    "global": "one routing over the whole batch",
}

#: the platforms whose ``auto`` compute dtype is bfloat16 (JAX's names for NVIDIA/AMD GPUs
#: and TPUs); float32 elsewhere
HALF_PRECISION_PLATFORMS = ("gpu", "cuda", "rocm", "tpu")

#: what the plan's ``experts`` line says of a capacity
DROPPED = "what overflows is dropped, the fraction logged as model/stat/moe_drop_fraction"

EXPERT_DISPATCHES = {
    "slabs": "all_to_all of fixed slabs",
    "ragged": "ragged_all_to_all of exactly the assignments",
    "ragged_gathered": "the ragged exchange from an all-gather (no ragged-all-to-all here)",
}


def compute_dtype(model_dtype: str, platform: str, override: str = "") -> tuple[str, str]:
    """The dtype a model computes in on ``platform``, and the rule that chose it: ``override``
    (``precision.compute_dtype``) when set, else ``model_dtype`` (``model.dtype``), whose
    ``auto`` is bfloat16 on GPUs and TPUs and float32 elsewhere. The one place the choice is
    made: the plan carries it, and the model computes in it."""
    if override:
        return override, "precision.compute_dtype"
    if model_dtype != "auto":
        return model_dtype, f"model.dtype={model_dtype}"
    chosen = "bfloat16" if platform in HALF_PRECISION_PLATFORMS else "float32"
    return chosen, f"model.dtype=auto on {platform}"


@dataclass(frozen=True)
class AttentionKernel:
    """The self-attention kernel of a training step: ``reference``, ``flash``, ``splash``,
    ``cudnn`` (or ``none`` for a model without attention), the kernel's block sizes where it
    takes them (splash: theseus-models' ``SplashBlocks``), and the context method it serves
    (``ring`` or ``all_gather`` when the sequence is split; then the flash kernel computes
    the blocks)."""

    name: str = "reference"
    blocks: Hashable | None = None
    context: str = "none"
    why: str = ""
    planned: bool = True  # False: named by model.attention alone, checked where it runs

    def label(self) -> str:
        return self.name if self.context == "none" else f"{self.context}/{self.name}"


@dataclass(frozen=True)
class ContextSplit:
    """The sequence split over the ``context`` axis: ``ways`` shards, attended by
    ``method`` (``ring`` or ``all_gather``) in ``order``'s layout; ``none`` when unsplit."""

    method: str = "none"
    order: str = "contiguous"
    ways: int = 1

    @property
    def split(self) -> bool:
        return self.method != "none"


@dataclass(frozen=True)
class RematChoice:
    """The activation checkpointing level the step runs (``none``, ``block``, ``mlp``,
    ``attention``, ``full``) and why it was chosen."""

    level: str = "none"
    reason: str = "not planned: nothing recomputed"


@dataclass(frozen=True)
class ExecutionPlan:
    """Everything about how the step runs that is not the math (see the module docstring)."""

    attention: AttentionKernel = field(default_factory=AttentionKernel)
    context: ContextSplit = field(default_factory=ContextSplit)
    experts: str = "none"  # one of EXPERT_ROUTES
    expert_ways: int = 1  # devices of the expert axis the experts are split over
    # the capacity factor of the all-to-all dispatch (0: dropless) and where it came from
    expert_capacity: float = 0.0
    capacity_rule: str = ""
    # the model's own capacity factor (``model.capacity_factor``; 0: dropless): what the
    # routings without an all-to-all apply
    model_capacity: float = 0.0
    # how a dropless mixture multiplies its rows with their experts (tiles, ragged_dot:
    # ``chips.moe_grouping``) and the rule that chose it
    moe_grouping: str = "tiles"
    grouping_rule: str = ""
    # how the all-to-all sends the tokens (one of EXPERT_DISPATCHES) and the rule that chose it
    expert_dispatch: str = "slabs"
    dispatch_rule: str = ""
    remat: RematChoice = field(default_factory=RematChoice)
    compute_dtype: str = "float32"
    dtype_rule: str = "as configured"
    # the mesh the step runs on: (axis, size) in the mesh's order; empty: none (one device)
    mesh_axes: tuple[tuple[str, int], ...] = ()
    platform: str = ""  # its chips' platform (cpu, gpu, tpu); "": this process's backend
    device_kind: str = ""

    def axis_size(self, name: str) -> int:
        """Devices the mesh axis ``name`` spans (1 without a mesh or that axis)."""
        return dict(self.mesh_axes).get(name, 1)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.mesh_axes)

    def unsplit(self) -> ExecutionPlan:
        """This plan for whole arrays on one device, outside the step's mesh: the sequence
        not split (its kernel on whole sequences), one routing over the batch, no mesh."""
        kernel = replace(self.attention, context="none")
        experts = "none" if self.experts == "none" else "global"
        return replace(
            self,
            attention=kernel,
            context=ContextSplit(),
            experts=experts,
            expert_ways=1,
            mesh_axes=(),
        )

    def expert_line(self) -> str:
        """The routing and whether tokens are dropped: ``all_to_all over expert=32, ...,
        dropless (...)``, ``per_device, dropless``, ``global, capacity factor 1.25 per expert
        (...)``; ``none`` for a dense model."""
        if self.experts == "none":
            return self.experts
        if self.experts != "all_to_all":
            own = f"{self.model_capacity:g}"
            if self.model_capacity <= 0:
                return f"{self.experts}, dropless (model.capacity_factor=0)"
            return (
                f"{self.experts}, capacity factor {own} per expert (model.capacity_factor="
                f"{own}; {DROPPED})"
            )
        sends = f"{EXPERT_DISPATCHES[self.expert_dispatch]} ({self.dispatch_rule})"
        factor = f"{self.expert_capacity:g}"
        bound = (
            f"each expert taking at most {factor}x its balanced share of what arrives"
            if self.expert_dispatch != "slabs"
            else f"capacity factor {factor} per expert"
        )
        room = (
            f"{bound} ({self.capacity_rule}; {DROPPED})"
            if self.expert_capacity > 0
            else f"dropless ({self.capacity_rule})"
        )
        return f"all_to_all over expert={self.expert_ways}, {sends}, {room}"

    def capped(self) -> bool:
        """Whether a capacity sizes the experts' rows (then no grouping applies: each expert
        multiplies its capacity's rows in one batched matmul)."""
        split_capacity = self.experts == "all_to_all" and self.expert_capacity > 0
        return self.model_capacity > 0 or split_capacity

    def grouping_line(self) -> str:
        """``ragged_dot (auto: ...)``, or the capacity layout when a capacity applies."""
        if self.capped():
            return "a batched matmul over each expert's capacity rows (a capacity applies)"
        return (
            f"{self.moe_grouping} ({self.grouping_rule})"
            if self.grouping_rule
            else self.moe_grouping
        )

    def lines(self) -> list[str]:
        """The plan as ``name: value`` lines for the start-up log and the dry run."""
        kernel = self.attention
        blocks = f" {kernel.blocks}" if kernel.blocks is not None else ""
        context = (
            f"{self.context.method} over {self.context.ways} ({self.context.order})"
            if self.context.split
            else "not split"
        )
        return [
            f"attention: {kernel.label()}{blocks}" + (f" ({kernel.why})" if kernel.why else ""),
            f"context: {context}",
            f"experts: {self.expert_line()} ({EXPERT_ROUTES[self.experts]})",
            *([f"expert matmuls: {self.grouping_line()}"] if self.experts != "none" else []),
            f"remat: {self.remat.level} ({self.remat.reason})",
            f"compute dtype: {self.compute_dtype} ({self.dtype_rule})",
        ]
