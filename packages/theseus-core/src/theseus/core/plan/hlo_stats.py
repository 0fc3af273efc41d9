"""What one device's compiled program does per step, read from its optimized HLO text.

XLA's cost analysis counts the body of a loop once, whatever its trip count, and its GPU
backend returns none at all; so this reads the compiled module itself (``compiled.as_text()``,
per device: after SPMD partitioning every shape is a shard) and counts each instruction as
many times as it runs:

* **trip counts**: a ``while`` runs its body ``known_trip_count`` times (XLA:GPU writes it in
  the loop's backend config), or ``ceil((N - start) / step)`` times when its condition is
  ``counter < N`` with a constant ``N`` (how XLA:TPU leaves scans, ``fori_loop``s with static
  bounds and its windowed matmuls, which step by 2: ``trip_count``). A loop with neither (bounds computed at run time, like flash attention's causal key loop) is
  counted once and reported in ``dynamic_loops``. A computation called from several places
  runs as often as all of them together.
* **FLOPs**: ``2 * output elements * contracted size`` for every ``dot`` and ``convolution``
  (XLA:TPU writes matmuls as convolutions), inside fusions too, and for cuBLAS GEMM calls;
  cuDNN fused attention calls from their shapes (forward ``4 * B * H * T * S * K``, backward
  2.5 times that -- five matmuls for two -- halved when causal, since the kernel skips the
  masked blocks); grouped-matmul Mosaic kernels from their shapes, each row multiplied with
  one group's matrix: XLA:TPU's for ``jax.lax.ragged_dot`` (``ragged-dot-*``; its weight
  gradient is a matmul masked per expert, counted as written: every expert), megablox's
  ``gmm``/``tgmm`` (MaxText's dropless experts, weight gradient included) and theseus's
  grouped weight gradient (``tgmm_theseus``). Other Pallas and
  Mosaic kernels (splash) are opaque: counted as 0 and in ``opaque_kernels``.
* **bytes**: for every instruction of a non-fused computation, the bytes of its operands and
  results (a fusion reads its inputs and writes its outputs once), bookkeeping (tuples,
  bitcasts, parameters, loop and call boundaries) excluded: the HBM traffic of a roofline.
* **collectives** by kind (all-gather, reduce-scatter, all-reduce, all-to-all,
  collective-permute): per device, the larger of what a collective sends in and gets out
  (an all-gather's result, a reduce-scatter's input), summed over the step. A collective
  is work for the chip's links, not for its cores: the roofline leaves it out (``overlap``
  prices it over the links and finds how much of it the schedule hides behind compute).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from theseus.core.plan.hlo_text import (
    Computation,
    Instruction,
    array_bytes,
    called,
    integer,
    parse_module,
    parse_shapes,
)
from theseus.core.plan.trip_count import trip_count

COLLECTIVES = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
)
BOOKKEEPING = {
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "call",
    "conditional", "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency",
    "all-gather-done", "all-reduce-done", "reduce-scatter-done", "all-to-all-done",
    "collective-permute-done", "async-done", "async-update", "copy-done", "send-done",
    "slice-done", "slice-start", "copy-start",
    "recv-done", "domain", "iota",
}  # fmt: skip

_DIMS = re.compile(r"\b(lhs_contracting_dims|lhs_batch_dims)=\{([\d,]*)\}")


@dataclass
class HloStats:
    """Per device and per step, loops counted with their trip counts."""

    flops: float = 0.0  # matmul (dot, convolution, GEMM, cuDNN attention) FLOPs
    float32_flops: float = 0.0  # the part of ``flops`` whose operands are float32
    flops_once: float = 0.0  # the same with every loop body counted once (as XLA does)
    bytes: float = 0.0  # operand + result bytes of the unfused instructions
    roofline_seconds: float = 0.0  # sum over instructions of max(FLOPs / peak, bytes / bw)
    roofline_seconds_once: float = 0.0  # the same with every loop body counted once
    collective_bytes: dict[str, float] = field(default_factory=dict)
    collective_counts: dict[str, int] = field(default_factory=dict)
    dynamic_loops: int = 0  # while loops of unknown trip count, counted once
    opaque_kernels: int = 0  # Pallas/Mosaic calls whose FLOPs are not counted
    kernel_seconds: float = 0.0  # the opaque calls priced by a measured rate (``kernel_time``)
    seconds_by_kind: dict[str, float] = field(default_factory=dict)  # the roofline, by kind
    # seconds of one run of each instruction the roofline prices, by name (for ``overlap``)
    instruction_seconds: dict[str, float] = field(default_factory=dict)
    trip_counts: dict[str, int] = field(default_factory=dict)  # each while loop's, by name


def analyze(
    text: str,
    peak_flops: float = 0.0,
    hbm_bandwidth: float = 0.0,
    float32_peak: float = 0.0,
    kernel_time: Callable[[Instruction, dict], float | None] | None = None,
) -> HloStats:
    """FLOPs, bytes, collectives (and, given the chip's peaks, a roofline) of one device.

    ``float32_peak``: the rate of matmuls with float32 operands (a GPU runs them as TF32, at
    half the bf16 rate); 0 prices them like the others. ``kernel_time(instruction, shapes)``:
    seconds of an opaque kernel call (None: not priced), added to the roofline."""
    computations = parse_module(text)
    by_name = {c.name: c for c in computations}
    shapes = {i.name: i.result for c in computations for i in c.instructions}
    stats = HloStats()
    times, times_once, fused = _multipliers(computations, by_name, stats)
    own_flops = {c.name: _own_flops(c, shapes, stats) for c in computations}
    nested = _nested_flops(computations, own_flops)
    own_float32 = {c.name: _own_float32_flops(c, shapes) for c in computations}
    nested_float32 = _nested_flops(computations, own_float32)
    collective_bytes: dict[str, float] = defaultdict(float)
    collective_counts: dict[str, int] = defaultdict(int)
    by_kind: dict[str, float] = {}
    for computation in computations:
        runs, runs_once = times.get(computation.name, 0), times_once.get(computation.name, 0)
        stats.flops += runs * own_flops[computation.name]
        stats.float32_flops += runs * own_float32[computation.name]
        stats.flops_once += runs_once * own_flops[computation.name]
        for instruction in computation.instructions:
            kind = collective_kind(instruction.opcode)
            if kind and runs:
                collective_bytes[kind] += runs * collective_payload(instruction, shapes)
                collective_counts[kind] += int(runs)  # trip counts: whole numbers
            if computation.name in fused or instruction.opcode in BOOKKEEPING or not runs:
                continue
            if transfers(instruction, by_name):
                continue  # the links' work, not the cores' (``overlap``)
            moved = _bytes_moved(instruction, shapes, by_name)
            stats.bytes += runs * moved
            if peak_flops and hbm_bandwidth:
                op_flops = _instruction_flops(instruction, shapes, nested)
                compute = op_flops / peak_flops
                if float32_peak:
                    f32 = _instruction_flops(instruction, shapes, nested_float32, float32=True)
                    compute += f32 / float32_peak - f32 / peak_flops
                seconds = max(compute, moved / hbm_bandwidth)
                priced = kernel_time(instruction, shapes) if kernel_time else None
                if priced is None and instruction.opcode == "custom-call" and _free(instruction):
                    priced = 0.0
                if priced is not None:
                    seconds = priced
                    stats.kernel_seconds += runs * priced
                kind = roofline_kind(instruction, by_name)
                by_kind[kind] = by_kind.get(kind, 0.0) + runs * seconds
                stats.instruction_seconds[instruction.name] = seconds
                stats.roofline_seconds += runs * seconds
                stats.roofline_seconds_once += runs_once * seconds
    stats.collective_bytes = dict(collective_bytes)
    stats.collective_counts = dict(collective_counts)
    stats.seconds_by_kind = dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))
    return stats


FREE_CALLS = ("AllocateBuffer", "AssumeGatherIndicesInBound", "GatherScatterIndicesBitpacked")


def _free(instruction: Instruction) -> bool:
    """A custom call that moves no data (XLA:TPU's buffer and index bookkeeping)."""
    return any(f'custom_call_target="{name}"' in instruction.attributes for name in FREE_CALLS)


def roofline_kind(instruction: Instruction, by_name: dict[str, Computation]) -> str:
    """What an instruction is, for the estimate's breakdown: the kinds a profile shows."""
    if instruction.opcode == "custom-call":
        return "attention kernel" if "mha" in instruction.name else "custom-call"
    if instruction.opcode != "fusion":
        return instruction.opcode
    inner = by_name.get((called(instruction).get("calls") or [""])[0])
    opcodes = {i.opcode for i in inner.instructions} if inner else set()
    if opcodes & {"convolution", "dot"}:
        return "matmul"
    for opcode in ("dynamic-update-slice", "dynamic-slice", "reduce"):
        if opcode in opcodes:
            return opcode
    return "elementwise fusion"


def collective_kind(opcode: str) -> str | None:
    """``all-gather`` for ``all-gather`` and ``all-gather-start`` (the ``-done`` halves and
    everything else: None)."""
    base = opcode.removesuffix("-start")
    return base if base in COLLECTIVES and not opcode.endswith("-done") else None


def transfers(instruction: Instruction, by_name: dict[str, Computation]) -> list[Instruction]:
    """The collectives an instruction puts on the links: itself for a collective or the
    start of one, those of the computation an ``async-start`` or a fusion wraps (XLA:TPU
    fuses a reduce-scatter as an all-reduce and a slice of it); else none."""
    if collective_kind(instruction.opcode):
        return [instruction]
    if instruction.opcode not in ("async-start", "fusion"):
        return []
    return [
        inner
        for name in called(instruction).get("calls", [])
        for inner in (by_name[name].instructions if name in by_name else [])
        if collective_kind(inner.opcode)
    ]


def step_instructions(text: str) -> tuple[list[tuple[Instruction, float]], dict[str, list]]:
    """Every instruction of a module that runs, with how often it runs per step (scanned
    loops counted by their trip counts), and the result shapes of all values by name: for
    listings that pick instructions out (a kind of collective, a kernel) and count them as
    ``analyze`` does."""
    computations = parse_module(text)
    by_name = {c.name: c for c in computations}
    shapes = {i.name: i.result for c in computations for i in c.instructions}
    times, _, _ = _multipliers(computations, by_name, HloStats())
    ran = [
        (instruction, times[c.name])
        for c in computations
        if times.get(c.name, 0)
        for instruction in c.instructions
    ]
    return ran, shapes


def _multipliers(
    computations: list[Computation], by_name: dict[str, Computation], stats: HloStats
) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """How often each computation runs per step (and with loop bodies once), and which are
    fused or applied (reductions' scalar functions): their instructions are not separate
    kernels. Callers are printed after their callees, so walk from the end."""
    times: dict[str, float] = defaultdict(float)
    once: dict[str, float] = defaultdict(float)
    fused: set[str] = set()
    values = {i.name: i for c in computations for i in c.instructions}
    for computation in computations:
        if computation.entry:
            times[computation.name] = once[computation.name] = 1.0
    for computation in reversed(computations):
        runs, runs_once = times.get(computation.name, 0.0), once.get(computation.name, 0.0)
        if not runs:
            continue
        for instruction in computation.instructions:
            roles = called(instruction)
            trips = 1
            if "body" in roles:
                found = trip_count(instruction, by_name, values)
                stats.dynamic_loops += found is None
                trips = stats.trip_counts[instruction.name] = 1 if found is None else found
            for role, names in roles.items():
                for name in names:
                    repeat = trips if role in ("body", "condition") else 1
                    times[name] += runs * repeat
                    once[name] += runs_once
                    if role in ("calls", "to_apply", "called_computations"):
                        fused.add(name)
    return times, once, fused


def _own_flops(computation: Computation, shapes: dict, stats: HloStats) -> float:
    total = 0.0
    for instruction in computation.instructions:
        total += _matmul_flops(instruction, shapes, stats)
    return total


def _own_float32_flops(computation: Computation, shapes: dict) -> float:
    return sum(
        _matmul_flops(instruction, shapes, HloStats())
        for instruction in computation.instructions
        if _float32_operands(instruction, shapes)
    )


def _float32_operands(instruction: Instruction, shapes: dict) -> bool:
    found = shapes.get(instruction.operands[0]) if instruction.operands else None
    return found is not None and bool(found) and found[0][0] == "f32"


def _nested_flops(computations: list[Computation], own: dict[str, float]) -> dict[str, float]:
    """FLOPs of a computation with those of the fused computations it calls."""
    nested: dict[str, float] = {}
    for computation in computations:  # callees first
        total = own[computation.name]
        for instruction in computation.instructions:
            for name in called(instruction).get("calls", []):
                total += nested.get(name, 0.0)
        nested[computation.name] = total
    return nested


def _instruction_flops(
    instruction: Instruction, shapes: dict, nested: dict, float32: bool = False
) -> float:
    """The matmul FLOPs of one instruction, its fused computations' included (``float32``:
    only those with float32 operands, ``nested`` then counting those alone)."""
    calls = called(instruction).get("calls", [])
    if calls:
        return sum(nested.get(name, 0.0) for name in calls)
    if float32 and not _float32_operands(instruction, shapes):
        return 0.0
    return _matmul_flops(instruction, shapes, HloStats())


def _matmul_flops(instruction: Instruction, shapes: dict, stats: HloStats) -> float:
    op = instruction.opcode
    if op == "dot":
        return _dot_flops(instruction, shapes)
    if op == "convolution":
        return _convolution_flops(instruction, shapes)
    if op == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', instruction.attributes)
        name = target.group(1) if target else ""
        if "gemm" in name or "matmul" in name:
            return _gemm_flops(instruction, shapes)
        if "fmha" in name:
            return _fmha_flops(instruction, name)
        if name == "tpu_custom_call" and GROUPED.match(instruction.name):
            return _grouped_flops(instruction, shapes)
        if name in ("tpu_custom_call", "mosaic_gpu", "__gpu$xla.gpu.triton"):
            stats.opaque_kernels += 1
    return 0.0


# grouped-matmul Mosaic kernels: XLA:TPU's for ragged_dot (and the one reading its group
# sizes), megablox's gmm and its transposed tgmm (MaxText's dropless experts), and theseus's
# kernels (``gmm_theseus``, ``tgmm_theseus``, named after the JAX call that holds them)
GROUPED = re.compile(r"^(ragged-dot|t?gmm)\b|^(\w*_)?t?gmm_theseus")


def _grouped_flops(instruction: Instruction, shapes: dict) -> float:
    """``2 M K N`` of a grouped matmul, every one of M rows through one group: rows ``[M, K]``
    times groups of ``[K, N]`` into ``[M, N]`` (``ragged-dot``, ``gmm``), or rows ``[M, K]``
    and ``[M, N]`` into one ``[K, N]`` per group (``tgmm``: a weight gradient); 0 for a
    kernel of no float operands (the group sizes' metadata)."""
    floats = [
        dims
        for operand in instruction.operands
        for dtype, dims in shapes.get(operand, [])
        if dtype in ("bf16", "f32", "f16")
    ]
    rows = [dims for dims in floats if len(dims) == 2]
    out = instruction.result[0][1] if instruction.result else ()
    if len(out) == 2 and rows and rows[0][0] == out[0] and any(len(d) == 3 for d in floats):
        return 2.0 * math.prod(out) * rows[0][1]
    if len(out) == 3 and len(rows) == 2 and rows[0][0] == rows[1][0]:
        return 2.0 * rows[0][0] * out[1] * out[2]
    return 0.0


def _operand_shape(instruction: Instruction, index: int, shapes: dict) -> tuple[int, ...]:
    if index >= len(instruction.operands):
        return ()
    found = shapes.get(instruction.operands[index])
    return found[0][1] if found else ()


def _dot_flops(instruction: Instruction, shapes: dict) -> float:
    lhs = _operand_shape(instruction, 0, shapes)
    dims = dict(_DIMS.findall(instruction.attributes))
    contracting = [int(d) for d in dims.get("lhs_contracting_dims", "").split(",") if d]
    k = math.prod(lhs[d] for d in contracting if d < len(lhs))
    out = math.prod(instruction.result[0][1]) if instruction.result else 0
    return 2.0 * out * k


def _convolution_flops(instruction: Instruction, shapes: dict) -> float:
    """2 * batch * output features * (input features / groups) * the (output, window)
    position pairs that read the input, not its padding, in each spatial dimension.

    XLA:TPU writes matmuls as convolutions, some with windows padded on both sides (how it
    lays out a contraction against a sliced operand); products with padding are not work.
    """
    lhs = _operand_shape(instruction, 0, shapes)
    labels = re.search(r"dim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)", instruction.attributes)
    if not labels or not lhs or not instruction.result:
        return 0.0
    lhs_labels, _, out_labels = labels.groups()
    out = instruction.result[0][1]
    if len(lhs_labels) != len(lhs) or len(out_labels) != len(out):
        return 0.0
    groups = re.search(r"feature_group_count=(\d+)", instruction.attributes)
    features_in = lhs[lhs_labels.index("f")] // (int(groups.group(1)) if groups else 1)
    total = 2.0 * out[out_labels.index("b")] * out[out_labels.index("f")] * features_in
    window = _window(instruction.attributes)
    for dim, spec in enumerate(window):
        digit = str(dim)
        if digit not in lhs_labels or digit not in out_labels:
            continue
        total *= _valid_pairs(lhs[lhs_labels.index(digit)], out[out_labels.index(digit)], spec)
    return total


def _window(attributes: str) -> list[dict[str, int]]:
    """Per spatial dimension: size, pad_lo, stride, lhs and rhs dilation (1 when absent)."""
    found = re.search(r"window=\{([^}]*)\}", attributes)
    if not found:
        return []
    fields = dict(part.split("=", 1) for part in found.group(1).split() if "=" in part)
    sizes = [int(x) for x in fields.get("size", "").split("x") if x]

    def each(key: str, default: int) -> list[int]:
        values = fields.get(key)
        return [int(x) for x in values.split("x")] if values else [default] * len(sizes)

    pads = (
        [int(p.split("_")[0]) for p in fields["pad"].split("x")]
        if "pad" in fields
        else [0] * len(sizes)
    )
    strides, lhs_dilate, rhs_dilate = (
        each("stride", 1),
        each("lhs_dilate", 1),
        each("rhs_dilate", 1),
    )
    return [
        {
            "size": sizes[d],
            "pad": pads[d],
            "stride": strides[d],
            "lhs": lhs_dilate[d],
            "rhs": rhs_dilate[d],
        }
        for d in range(len(sizes))
    ]


def _valid_pairs(inputs: int, outputs: int, spec: dict[str, int]) -> int:
    """(output, window) positions of one spatial dimension that land on an input element."""
    out = np.arange(outputs)[:, None]
    tap = np.arange(spec["size"])[None, :]
    position = out * spec["stride"] + tap * spec["rhs"] - spec["pad"]  # in the dilated input
    dilated = (inputs - 1) * spec["lhs"] + 1
    valid = (position >= 0) & (position < dilated) & (position % spec["lhs"] == 0)
    return int(valid.sum())


def _gemm_flops(instruction: Instruction, shapes: dict) -> float:
    config = _backend_config(instruction)
    numbers = (config.get("gemm_backend_config") or {}).get("dot_dimension_numbers") or {}
    lhs = _operand_shape(instruction, 0, shapes)
    contracting = [int(d) for d in numbers.get("lhs_contracting_dimensions", [])]
    k = math.prod(lhs[d] for d in contracting if d < len(lhs))
    out = math.prod(instruction.result[0][1]) if instruction.result else 0
    return 2.0 * out * k


def _fmha_flops(instruction: Instruction, target: str) -> float:
    """cuDNN attention: q is BxTxHxK and k BxSxGxK in the operand layout constraints."""
    layouts = re.search(r"operand_layout_constraints=\{(.*?)\}, ", instruction.attributes)
    operands = parse_shapes(layouts.group(1)) if layouts else []
    if len(operands) < 2 or len(operands[0][1]) != 4 or len(operands[1][1]) != 4:
        return 0.0
    (B, T, H, K), S = operands[0][1], operands[1][1][1]
    flops = 4.0 * B * H * T * S * K * (2.5 if "Backward" in target else 1.0)
    causal = '"mask_type":"CAUSAL"' in instruction.attributes.replace(" ", "")
    return flops / 2 if causal else flops


def _backend_config(instruction: Instruction) -> dict:
    found = re.search(r"backend_config=(\{.*\})", instruction.attributes)
    if not found:
        return {}
    try:
        return json.loads(found.group(1))
    except ValueError:
        return {}


SLICING = ("dynamic-slice", "slice", "gather")


def _bytes_moved(instruction: Instruction, shapes: dict, by_name: dict) -> int:
    """HBM bytes an instruction reads and writes: its operands and results, except what it
    only slices (a scanned layer reads its own slice of the stacked weights, not all of
    them) and the buffer a dynamic-update-slice writes in place (only the update moves; a
    slice of it read beside, as a scatter-add's loop reads what it adds to, moves too)."""
    if instruction.opcode in SLICING:
        return 2 * instruction.result_bytes
    if instruction.opcode == "dynamic-update-slice":
        update = shapes.get(instruction.operands[1], []) if len(instruction.operands) > 1 else []
        return 2 * sum(array_bytes(shape) for shape in update)
    fused = by_name.get((called(instruction).get("calls") or [""])[0])
    read = [_operand_bytes(name, shapes) for name in instruction.operands]
    written = instruction.result_bytes
    if instruction.opcode == "fusion" and fused is not None:
        users: dict[str, list[Instruction]] = defaultdict(list)
        for inner in fused.instructions:
            for operand in inner.operands:
                users[operand].append(inner)
        for inner in fused.instructions:
            index = integer(inner.arguments) if inner.opcode == "parameter" else None
            uses = users.get(inner.name, [])
            if index is not None and index < len(read) and uses:
                # a buffer updated in place, and read only where it is sliced (a slice read,
                # changed and written back: a scatter-add's loop) moves only those slices
                others = [
                    use
                    for use in uses
                    if not (use.opcode == "dynamic-update-slice" and use.operands[0] == inner.name)
                ]
                if not others:
                    read[index] = 0
                    continue
                sliced = _sliced_bytes(inner.name, {**users, inner.name: others}, by_name)
                if sliced is not None:
                    read[index] = sliced
        # a dynamic-update-slice of a buffer passed in writes only its update, in place
        # (beside any other outputs of the fusion: a matmul whose output is stacked)
        parameters = {i.name for i in fused.instructions if i.opcode == "parameter"}
        for update in fused.instructions:
            if update.opcode == "dynamic-update-slice" and len(update.operands) > 1:
                if update.operands[0] in parameters:
                    saved = update.result_bytes - _operand_bytes(update.operands[1], shapes)
                    written = max(written - saved, 0)
    return sum(read) + written


def _sliced_bytes(
    name: str, users: dict[str, list[Instruction]], by_name: dict[str, Computation]
) -> int | None:
    """Bytes of ``name`` that are read when every use only slices it (through bitcasts,
    reshapes and nested fusions that only slice it), else None."""
    total = 0
    for use in users.get(name, []):
        if use.opcode in SLICING and use.operands and use.operands[0] == name:
            total += use.result_bytes
        elif use.opcode in ("bitcast", "reshape"):
            inner = _sliced_bytes(use.name, users, by_name)
            if inner is None:
                return None
            total += inner
        elif use.opcode == "fusion":
            inner = _sliced_in_fusion(use, name, by_name)
            if inner is None:
                return None
            total += inner
        else:
            return None
    return total if users.get(name) else None


def _sliced_in_fusion(
    fusion: Instruction, name: str, by_name: dict[str, Computation]
) -> int | None:
    """Bytes a nested fusion reads of its operand ``name`` when it only slices it."""
    computation = by_name.get((called(fusion).get("calls") or [""])[0])
    if computation is None:
        return None
    positions = [i for i, operand in enumerate(fusion.operands) if operand == name]
    users: dict[str, list[Instruction]] = defaultdict(list)
    for inner in computation.instructions:
        for operand in inner.operands:
            users[operand].append(inner)
    total = 0
    for inner in computation.instructions:
        if inner.opcode == "parameter" and integer(inner.arguments) in positions:
            sliced = _sliced_bytes(inner.name, users, by_name)
            if sliced is None:
                return None
            total += sliced
    return total


def _operand_bytes(name: str, shapes: dict) -> int:
    return sum(array_bytes(shape) for shape in shapes.get(name, []))


def collective_payload(instruction: Instruction, shapes: dict) -> int:
    """Bytes one device's collective moves: the larger of its operands and its results. A
    ``ragged-all-to-all`` sends part of its input into part of a buffer sized for the worst
    case, as the routing decides: it counts the smaller of its data operand and its result
    (what a device sends and gets when the routing is balanced and nothing overflows)."""
    if instruction.opcode == "ragged-all-to-all":
        data = instruction.operands[:1]
        sent = sum(array_bytes(shape) for name in data for shape in shapes.get(name, []))
        return min(sent, instruction.result_bytes)
    operand_bytes = sum(
        array_bytes(shape) for name in instruction.operands for shape in shapes.get(name, [])
    )
    result = instruction.result_bytes
    if instruction.opcode.endswith("-start"):  # the result holds the operands, then outputs
        # (and, for a collective-permute, two u32 scalars of context: not moved)
        result = sum(array_bytes(s) for s in instruction.result if s[1] or s[0] != "u32")
        result = max(result - operand_bytes, 0) if result > operand_bytes else result
    return max(operand_bytes, result)
