"""Matmul FLOPs of a traced program, loops counted as many times as they run.

XLA's cost analysis (``compiled.cost_analysis()``) counts the body of a loop once, whatever
its trip count: a step whose layers run under ``lax.scan`` reports the FLOPs of one layer
(measured: the same count at 2 and 6 layers). To check the model's own FLOPs count
(what MFU divides by) against the program that really runs, this walks the step's jaxpr and
adds ``2 * M * N * K`` for every ``dot_general``, times the length of every enclosing scan:
forward, backward and rematerialised recomputation alike. ``while`` loops whose trip count
is not static (``fori_loop`` with traced bounds) are counted once and reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
from jax.extend import core as jax_core


@dataclass
class ProgramFlops:
    flops: float = 0.0
    dynamic_loops: int = 0  # while loops counted once (trip count unknown when tracing)


def program_flops(fn: Any, *args: Any) -> ProgramFlops:
    """Matmul FLOPs of ``fn(*args)`` (arguments may be ``jax.ShapeDtypeStruct``s)."""
    return jaxpr_flops(jax.make_jaxpr(fn)(*args))


def jaxpr_flops(closed: Any) -> ProgramFlops:
    """Matmul FLOPs of a traced program (a ``ClosedJaxpr``: ``jitted.trace(...).jaxpr``)."""
    result = ProgramFlops()
    result.flops = _count(closed.jaxpr, result)
    return result


def _count(jaxpr: Any, result: ProgramFlops) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_flops(eqn)
        elif name == "cond":  # one branch runs: count the most expensive
            total += max((_count(b.jaxpr, result) for b in eqn.params["branches"]), default=0.0)
        elif name == "while":
            result.dynamic_loops += 1
            total += _count(eqn.params["body_jaxpr"].jaxpr, result)
        else:
            times = eqn.params["length"] if name == "scan" else 1
            total += times * sum(_count(sub, result) for sub in _inner(eqn.params))
    return total


def _dot_flops(eqn: Any) -> float:
    lhs = eqn.invars[0].aval.shape
    (contracting, _), _ = eqn.params["dimension_numbers"]
    k = math.prod(lhs[d] for d in contracting)
    return 2.0 * math.prod(eqn.outvars[0].aval.shape) * k


def _inner(params: dict[str, Any]) -> list[Any]:
    """The jaxprs an equation runs (jit, remat, custom_vjp/jvp, scan bodies...)."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, jax_core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, jax_core.Jaxpr):
                found.append(item)
    return found
