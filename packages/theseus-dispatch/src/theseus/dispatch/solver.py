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
    if request.nodes:
        return request.nodes
    if request.chips:
        return math.ceil(request.chips / target.chips_per_node)
    return 1


def static_reason(target: Any, request: Request) -> str | None:
    if request.chip and request.chip.lower() != target.chip.lower():
        return f"offers {target.chip}, not {request.chip}"
    nodes = nodes_for(target, request)
    if nodes > target.nodes:
        return f"offers at most {target.nodes} node(s), needs {nodes}"
    if request.chips:
        per_node = math.ceil(request.chips / nodes)
        if per_node > target.chips_per_node:
            return f"offers {target.chips_per_node} chip(s) per node, needs {per_node}"
    return None


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
