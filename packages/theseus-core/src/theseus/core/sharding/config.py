"""The ``sharding`` config group and its checks (cheap to import: no JAX)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.errors import ConfigError
from theseus.core.ranges import first_problem

# Outermost first: neighbouring devices (the fastest links) share the tensor axis, then the
# context axis (a ring of neighbours), then the expert axis (all-to-all).
MESH_AXES = ("data", "fsdp", "expert", "context", "tensor")
SHOWN_WHEN_ONE = ("data", "fsdp", "tensor")  # the others are named only when they split
BASES = ("dp", "zero1", "fsdp")
# theseus.core.sharding.remat says what each level keeps
REMAT = ("auto", "none", "block", "mlp", "attention", "full")
CONTEXT_ATTENTION = ("ring", "all_gather")
EXPERT_DISPATCH = ("auto", "ragged", "slabs")
CONTEXT_ORDERS = ("zigzag", "contiguous")  # theseus.core.sharding.sequence lays them out


class ShardingError(ConfigError):
    """A mesh or a parameter layout that the devices or the shapes do not allow."""


@dataclass
class ShardingConfig:
    strategy: str = option(
        "dp",
        "dp | zero1 | fsdp | tp, or one of dp, zero1, fsdp combined with tp: 'fsdp+tp'",
        resume_safe=True,
    )
    data: int = option(
        0,
        "data mesh axis size; -1: the rest; 0: the rest unless fsdp takes it",
        resume_safe=True,
        ge=-1,
    )
    fsdp: int = option(
        0,
        "fsdp mesh axis size; -1: the rest; 0: the rest under fsdp, else 1",
        resume_safe=True,
        ge=-1,
    )
    tensor: int = option(
        1, "tensor mesh axis size (heads and MLP width); -1: the rest", resume_safe=True, ge=-1
    )
    expert: int = option(
        0,
        "expert mesh axis size: MoE experts split over it, tokens sent to them by all-to-all "
        "(it splits the batch too); -1: the rest; 0: auto (a mixture: the largest divisor of "
        "its expert count that the devices allow, but 1 for a dropless mixture on TPUs; a "
        "dense model: 1)",
        resume_safe=True,
        ge=-1,
    )
    expert_capacity: float = option(
        0.0,
        "capacity factor of the all-to-all dispatch when experts are split over expert and "
        "the model is dropless (model.capacity_factor=0); 0 (the default): dropless, as "
        "Hugging Face and MaxText are (slabs of every assignment, or a ragged receive buffer "
        "with room for all). f > 0 drops tokens: each expert takes at most "
        "ceil(f x tokens x k / experts) of each device's assignments, the rest dropped (the "
        "fraction logged); with expert_dispatch=ragged, at most "
        "ceil(f x tokens x k / its device's experts) of the rows that arrive at its device",
        resume_safe=True,
        ge=0,
    )
    expert_dispatch: str = option(
        "auto",
        "how the all-to-all sends tokens to experts split over expert: ragged "
        "(ragged_all_to_all: each device sends exactly its assignments, no padding; on CPU "
        "the same exchange from an all-gather) | slabs (all_to_all of fixed per-expert "
        "capacity slabs) | auto: ragged on TPU for a dropless model, else slabs",
        resume_safe=True,
        choices=EXPERT_DISPATCH,
    )
    context: int = option(
        1,
        "context mesh axis size: every sequence split over this many devices (long "
        "sequences); -1: the rest",
        resume_safe=True,
        ge=-1,
    )
    context_attention: str = option(
        "ring",
        "attention over the context axis: ring (K/V blocks passed around the devices, one "
        "block in memory) | all_gather (every device gathers all K/V: simpler, more memory)",
        resume_safe=True,
        choices=CONTEXT_ATTENTION,
    )
    context_order: str = option(
        "zigzag",
        "how a sequence is cut over the context devices: zigzag (device d holds chunks d and "
        "2N-1-d of 2N: equal causal work everywhere) | contiguous (device d holds chunk d)",
        resume_safe=True,
        choices=CONTEXT_ORDERS,
    )
    remat: str = option(
        "auto",
        "activation checkpointing: auto (the most kept that fits the chip) | none (keep every "
        "matmul output) | block | mlp (recompute the MLP's hidden) | attention (keep only the "
        "attention kernel's output) | full (keep block inputs)",
        resume_safe=True,
        choices=REMAT,
    )

    def __post_init__(self) -> None:
        """Names that select code are checked when the config is built, naming the key."""
        problem = first_problem(self, "sharding")
        if problem:
            raise ShardingError(problem)


def parse_strategy(strategy: str) -> tuple[str, bool]:
    """``(base, tensor_parallel)`` from ``dp``, ``zero1``, ``fsdp``, ``tp``, ``fsdp+tp``, ..."""
    parts = [p for p in str(strategy).replace("x", "+").replace(" ", "").split("+") if p]
    tensor = "tp" in parts
    bases = [p for p in parts if p != "tp"]
    unknown = [p for p in bases if p not in BASES]
    if unknown or len(bases) > 1 or not parts or parts.count("tp") > 1:
        raise ShardingError(
            f"sharding.strategy={strategy!r} is not one of dp, zero1, fsdp, tp, "
            "or dp/zero1/fsdp combined with tp ('fsdp+tp')"
        )
    return (bases[0] if bases else "dp"), tensor


def mesh_shape(config: ShardingConfig, device_count: int, experts: int = 0) -> dict[str, int]:
    """Axis sizes (data, fsdp, expert, context, tensor) whose product is ``device_count``.

    Positive sizes are taken as given, ``-1`` takes the devices left (at most one axis),
    ``0`` (auto) takes them when no axis says ``-1`` -- ``fsdp`` under the fsdp strategy,
    ``data`` otherwise -- and is 1 everywhere else, but for ``expert``: auto there splits a
    mixture of ``experts`` routed experts (the model's ``n_experts``; 0 for a dense model)
    as :func:`auto_experts` says.
    """
    base, _ = parse_strategy(config.strategy)
    sizes = {axis: getattr(config, axis) for axis in MESH_AXES}
    for axis, size in sizes.items():
        if size < -1:
            raise ShardingError(f"sharding.{axis}={size}: use a positive size, -1 (the rest) or 0")
    rest = [axis for axis, size in sizes.items() if size == -1]
    if len(rest) > 1:
        raise ShardingError(f"sharding: only one mesh axis may be -1, got {', '.join(rest)}")
    if not rest:
        auto = "fsdp" if base == "fsdp" else "data"
        if sizes[auto] == 0:
            rest = [auto]
    if sizes["expert"] == 0 and "expert" not in rest:
        sizes["expert"] = auto_experts(experts, device_count, sizes, rest)
    sizes = {axis: (1 if size == 0 else size) for axis, size in sizes.items()}
    fixed = math.prod(size for axis, size in sizes.items() if axis not in rest)
    if rest:
        if device_count % fixed:
            raise ShardingError(
                f"sharding mesh {_describe(sizes, rest)} needs a multiple of {fixed} devices, "
                f"but there are {device_count}"
            )
        sizes[rest[0]] = device_count // fixed
    elif fixed != device_count:
        raise ShardingError(
            f"sharding mesh {_describe(sizes, rest)} has {fixed} devices, but there are "
            f"{device_count}; make the product of the axes {device_count} or set one to -1"
        )
    return sizes


def auto_experts(n_experts: int, device_count: int, sizes: dict[str, int], rest: list[str]) -> int:
    """``sharding.expert=0``: the largest divisor of ``n_experts`` (a dense model: 0, giving
    1) that divides the devices the other fixed axes leave, so that the axis taking the rest
    (``fsdp`` under fsdp, else ``data``) keeps what is left over; without such an axis, those
    devices exactly when they divide the experts, else 1 (the mesh check then says why)."""
    fixed = math.prod(max(s, 1) for a, s in sizes.items() if a != "expert" and a not in rest)
    if n_experts <= 1 or device_count % fixed:
        return 1
    room = device_count // fixed
    if not rest:
        return room if n_experts % room == 0 else 1
    return max(d for d in range(1, n_experts + 1) if n_experts % d == 0 and room % d == 0)


def planned_devices(config: ShardingConfig) -> int | None:
    """The device count the config fixes (no axis takes "the rest"), else None."""
    base, _ = parse_strategy(config.strategy)
    sizes = {axis: getattr(config, axis) for axis in MESH_AXES}
    auto = "fsdp" if base == "fsdp" else "data"
    if any(size == -1 for size in sizes.values()) or sizes[auto] == 0:
        return None
    return math.prod(max(size, 1) for size in sizes.values())


def _describe(sizes: dict[str, int], rest: list[str]) -> str:
    shown = [a for a, s in sizes.items() if a in SHOWN_WHEN_ONE or a in rest or s != 1]
    return "(" + ", ".join(f"{a}={'-1' if a in rest else sizes[a]}" for a in shown) + ")"
