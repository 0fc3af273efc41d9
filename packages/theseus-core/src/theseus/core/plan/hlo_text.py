"""Optimized HLO text read into computations and instructions (names, opcodes, result
shapes, operands, attributes): what ``hlo_stats`` counts over."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

DTYPE_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "s16": 2, "u16": 2, "f16": 2,
    "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16,
}  # fmt: skip
_SHAPE = re.compile(r"\b([a-z]+[0-9a-z]*)\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=\s*(.*?)\s([a-z][a-z0-9_\-]*)\((.*)$")
_CALL = re.compile(
    r"\b(calls|body|condition|to_apply|true_computation|false_computation)=%([\w.\-]+)"
)
_CALL_LIST = re.compile(r"\b(calls|branch_computations|called_computations)=\{([^}]*)\}")
_NAME = re.compile(r"%([\w.\-]+)")


@dataclass
class Instruction:
    name: str
    opcode: str
    result: list[tuple[str, tuple[int, ...]]]
    operands: list[str]
    attributes: str
    arguments: str = ""  # the text between the parentheses (a constant's value)
    root: bool = False  # the computation's result

    @property
    def result_bytes(self) -> int:
        return sum(array_bytes(shape) for shape in self.result)


@dataclass
class Computation:
    name: str
    entry: bool
    instructions: list[Instruction] = field(default_factory=list)


def array_bytes(shape: tuple[str, tuple[int, ...]]) -> int:
    dtype, dims = shape
    return DTYPE_BYTES.get(dtype, 0) * math.prod(dims)


def parse_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every array shape in a (possibly tuple) HLO type, in order."""
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _SHAPE.findall(text)
        if dtype in DTYPE_BYTES or dtype == "token"
    ]


def parse_module(text: str) -> list[Computation]:
    """The computations of an HLO module's text, in the order printed (callees first)."""
    computations: list[Computation] = []
    current: Computation | None = None
    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            if header:
                current = Computation(header.group(2), bool(header.group(1)))
            continue
        if line.rstrip() == "}":  # (a kernel's multi-line attributes may start with "}}")
            computations.append(current)
            current = None
            continue
        match = _INSTRUCTION.match(line)
        if match:
            root, name, result, opcode, rest = match.groups()
            operands_text, attributes = _split_operands(rest)
            current.instructions.append(
                Instruction(
                    name,
                    opcode,
                    parse_shapes(result),
                    _NAME.findall(operands_text),
                    attributes,
                    operands_text,
                    bool(root),
                )
            )
    return computations


def _split_operands(rest: str) -> tuple[str, str]:
    """``rest`` is what follows ``opcode(``: the operand list up to its closing parenthesis,
    and the attributes after it."""
    depth = 1
    for index, char in enumerate(rest):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth == 0:
                return rest[:index], rest[index + 1 :]
    return rest, ""


def called(instruction: Instruction) -> dict[str, list[str]]:
    """The computations an instruction calls, by role (``calls``, ``body``, ...)."""
    roles: dict[str, list[str]] = defaultdict(list)
    for role, name in _CALL.findall(instruction.attributes):
        roles[role].append(name)
    for role, names in _CALL_LIST.findall(instruction.attributes):
        roles[role].extend(_NAME.findall(names))
    return dict(roles)


def integer(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None
