"""Pick a target for a request: static fit from the config, then a live check.

``--to auto`` tries targets in priority order and takes the first that fits; when none
does, the error lists every target with the reason it was passed over. A dry run
(``live=False``) makes the static fit only: it contacts no host or API and reads no
credentials, so it plans for a cluster or cloud this machine cannot reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from theseus.core.errors import TheseusError
from theseus.dispatch.targets.base import Backend, Request


class NoTargetError(TheseusError):
    """No configured target can take the run."""


def nodes_for(target: Any, request: Request) -> int:
    """The workers a run takes: ``--nodes``, else the workers ``--chips`` fill, else one
    (a slice: all of its workers)."""
    if request.nodes:
        return request.nodes
    if request.chips:
        return math.ceil(request.chips / target.chips_per_node)
    return target.nodes if is_slice(target) else 1


def is_slice(target: Any) -> bool:
    """Whether the target is one slice of chips (a TPU VM), whose every worker a launch
    starts: a run takes the slice whole."""
    return bool(getattr(target, "whole_slice", False))


def static_reason(target: Any, request: Request) -> str | None:
    if request.chip and request.chip.lower() != target.chip.lower():
        return f"offers {target.chip}, not {request.chip}"
    if is_slice(target):
        return slice_reason(target, request)
    per_node = target.chips_per_node
    if request.chips and request.chips % per_node:  # a worker takes all its node's chips
        fewer, more = request.chips // per_node * per_node, -(-request.chips // per_node) * per_node
        counts = " or ".join(str(n) for n in (fewer, more) if n)
        return (
            f"gives each worker its node's {per_node} {target.chip} chip(s), so --chips "
            f"{request.chips} is no whole number of workers (ask for {counts})"
        )
    nodes = nodes_for(target, request)
    if request.chips and request.nodes and request.chips != nodes * per_node:
        return (
            f"--chips {request.chips} on --nodes {nodes}: each worker has {per_node} chip(s), "
            f"so {nodes} worker(s) have {nodes * per_node}"
        )
    if nodes > target.nodes:
        return f"offers at most {target.nodes} node(s), needs {nodes}"
    return None


def slice_reason(target: Any, request: Request) -> str | None:
    """A slice has the chips it has: ``--chips`` and ``--nodes`` may only name them all."""
    whole = target.nodes * target.chips_per_node
    asked = [
        f"--{flag} {value}"
        for flag, value, full in (
            ("chips", request.chips, whole),
            ("nodes", request.nodes, target.nodes),
        )
        if value and value != full
    ]
    if not asked:
        return None
    return (
        f"is one slice of {whole} {target.chip} chip(s) on {target.nodes} worker(s), all of "
        f"which a launch starts: ask for --chips {whole} (or leave it out), not {' '.join(asked)}"
    )


def solve(
    targets: dict[str, Any],
    priority: list[str],
    to: str,
    request: Request,
    backend_for: Callable[[str], Backend],
    live: bool = True,
) -> tuple[str, int]:
    """(target name, nodes). ``to`` is a target name or ``auto``; ``live=False`` skips each
    target's live check (``Backend.available``)."""
    if to != "auto" and to not in targets:
        raise NoTargetError(f"unknown target {to!r} (configured: {', '.join(priority)})")
    candidates = priority if to == "auto" else [to]
    reasons: list[str] = []
    for name in candidates:
        target = targets[name]
        reason = static_reason(target, request)
        nodes = nodes_for(target, request)
        if reason is None and live:
            reason = backend_for(name).available(request, nodes)
        if reason is None:
            return name, nodes
        reasons.append(f"{name} ({target.type}): {reason}")
    if to != "auto":
        raise NoTargetError(f"target {reasons[0]}")
    raise NoTargetError("no target can take this run: " + "; ".join(reasons))
