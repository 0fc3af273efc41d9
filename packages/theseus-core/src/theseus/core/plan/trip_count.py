"""How many times a ``while`` of an optimized HLO module runs its body, read from the text.

XLA:GPU (and XLA:CPU) write it in the loop's backend config (``known_trip_count``). XLA:TPU
leaves a scan or a ``fori_loop`` with static bounds as a loop whose condition is
``counter < N`` with a constant ``N``; the counter is one element of the loop's tuple, and it
need not start at 0 nor step by 1: the loops XLA:TPU writes for a matmul with its all-gather
or reduce-scatter in pieces (``windowed_dot_general``) step by 2, one piece from each
neighbour per trip. So the trips are ``ceil((N - start) / step)``, with the start read from
the tuple the loop is given (a constant, through copies) and the step from the body's result
(``counter + constant``); 0 and 1 where they cannot be read. The counter may be copied or
converted before it is compared or added to (``add(copy(get-tuple-element(p, k)), 2)``, as
XLA:TPU writes some windowed matmuls), and the sum copied before it is returned: each is
followed back through those. None: no bound found (a loop whose bounds are computed at run
time).
"""

from __future__ import annotations

import math
import re

from theseus.core.plan.hlo_text import Computation, Instruction, called, integer

_KNOWN = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_INDEX = re.compile(r"\bindex=(\d+)")
PASS_THROUGH = ("copy", "bitcast", "convert")


def trip_count(
    loop: Instruction, by_name: dict[str, Computation], values: dict[str, Instruction]
) -> int | None:
    """Trips of ``loop`` (``values``: every instruction of the module by name)."""
    known = _KNOWN.search(loop.attributes)
    if known:
        return int(known.group(1))
    roles = called(loop)
    condition = by_name.get((roles.get("condition") or [""])[0])
    bound = _bound(condition) if condition is not None else None
    if bound is None:
        return None
    limit, index = bound
    start, step = 0, 1
    if index is not None:
        body = by_name.get((roles.get("body") or [""])[0])
        start = _start(loop, index, values)
        step = _step(body, index) if body is not None else 1
    return max(0, math.ceil((limit - start) / step))


def _bound(condition: Computation) -> tuple[int, int | None] | None:
    """``N`` of ``counter < N`` (or ``N > counter``), and the counter's tuple index."""
    own = {i.name: i for i in condition.instructions}
    for i in condition.instructions:
        if i.opcode != "compare" or len(i.operands) != 2:
            continue
        left, right = (_constant(name, own) for name in i.operands)
        if "direction=LT" in i.attributes and right is not None:
            return right, _tuple_index(_origin(i.operands[0], own))
        if "direction=GT" in i.attributes and left is not None:
            return left, _tuple_index(_origin(i.operands[1], own))
    return None


def _start(loop: Instruction, index: int, values: dict[str, Instruction]) -> int:
    given = values.get(loop.operands[0]) if loop.operands else None
    if given is None or given.opcode != "tuple" or index >= len(given.operands):
        return 0
    found = _constant(given.operands[index], values)
    return found if found is not None else 0


def _step(body: Computation, index: int) -> int:
    """``c`` where the body's result holds ``counter + c`` at the counter's index."""
    own = {i.name: i for i in body.instructions}
    root = next((i for i in body.instructions if i.root), None)
    if root is None or root.opcode != "tuple" or index >= len(root.operands):
        return 1
    update = _origin(root.operands[index], own)
    if update is None or update.opcode != "add" or len(update.operands) != 2:
        return 1
    for counter, other in (update.operands, update.operands[::-1]):
        step = _constant(other, own)
        if _tuple_index(_origin(counter, own)) == index and step is not None and step > 0:
            return step
    return 1


def _origin(name: str, values: dict[str, Instruction]) -> Instruction | None:
    """The instruction ``name`` is a copy, bitcast or conversion of (itself if none)."""
    instruction = values.get(name)
    while instruction is not None and instruction.opcode in PASS_THROUGH:
        instruction = values.get(instruction.operands[0]) if instruction.operands else None
    return instruction


def _constant(name: str, values: dict[str, Instruction]) -> int | None:
    """The integer a scalar constant holds, through copies and conversions."""
    instruction = _origin(name, values)
    if instruction is None or instruction.opcode != "constant":
        return None
    return integer(instruction.arguments)


def _tuple_index(instruction: Instruction | None) -> int | None:
    if instruction is None or instruction.opcode != "get-tuple-element":
        return None
    found = _INDEX.search(instruction.attributes)
    return int(found.group(1)) if found else None
