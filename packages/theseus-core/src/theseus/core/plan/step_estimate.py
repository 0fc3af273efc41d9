"""How long one step would take on its chip: an estimate from the compiled program, no chip.

* **TPU**: XLA:TPU's own cost model (``cost_analysis()["optimal_seconds"]``) prices the
  program with each loop body once, like its FLOP count; it is scaled by the loops' trip
  counts with FLOPs as the weight: ``optimal_seconds * flops / flops_once`` (both from
  ``hlo_stats``), i.e. the compiler's seconds per FLOP, applied to every repetition.
* **NVIDIA GPU** (and a TPU program the cost model gives no time for): there is no cost
  model without a GPU, so a roofline over the compiled
  HLO: each instruction takes ``max(FLOPs / peak bf16 FLOP/s, bytes / HBM bandwidth)``
  (the chip's published peaks, ``chips.specs``), loops times their trip counts, plus the
  collectives' bytes over the chip's NVLink bandwidth, not overlapped with compute.

Either is an estimate (no autotuning, no measured kernel), labelled so wherever it is shown;
``bench/gpu.sh`` measures the real step where a GPU is at hand. Collective time is reported
for both: bytes / link bandwidth (an all-reduce moves its bytes twice: reduce-scatter then
all-gather).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.chips.specs import Chip
from theseus.core.plan.hlo_stats import HloStats

LINK_PASSES = {"all-reduce": 2.0}  # every other collective moves its bytes once


@dataclass
class StepEstimate:
    seconds: float
    method: str
    collective_seconds: float


def collective_seconds(stats: HloStats, chip: Chip) -> float:
    total = sum(LINK_PASSES.get(kind, 1.0) * n for kind, n in stats.collective_bytes.items())
    return total / chip.interconnect


# What a real GPU did against this roofline (docs/targets.md, "Measured on a GPU").
GPU_MEASURED = "on an H200, GPT 124M-Llama 1B steps took 1.53-1.63x this estimate"


def splash_pricer(text: str, device_kind: str) -> Any:
    """``kernel_time(instruction, shapes)`` for ``hlo_stats.analyze``: seconds of each splash
    attention call of the module ``text`` at the chip's measured rate (``kernel_rates``);
    None for other instructions, or on a chip never measured."""
    from theseus.core.chips.kernel_rates import UNITS, splash_rate

    fused = "splash_mha_dq" not in text  # a fused backward has no dq pass of its own

    def kernel_time(instruction: Any, shapes: dict) -> float | None:
        name = instruction.name
        if instruction.opcode != "custom-call" or not name.startswith("splash_mha"):
            return None
        q = next(  # the queries: BxHxTxK, or HxTxK for one row
            (
                dims
                for operand in instruction.operands
                for dtype, dims in shapes.get(operand, [])
                if dtype in ("bf16", "f32", "f16") and len(dims) in (3, 4) and dims[-1] <= 512
            ),
            None,
        )
        if q is None:
            return None
        B, H, T, K = q if len(q) == 4 else (1, *q)
        rate = splash_rate(device_kind, K, T)
        if rate is None:
            return None
        part = next(p for p in ("fwd", "dkv", "dq") if name.startswith(f"splash_mha_{p}"))
        units = UNITS["fused" if part == "dkv" and fused else part]
        return units * B * H * T * T * K / rate

    return kernel_time


def estimate_step(compiled: Any, stats: HloStats, chip: Chip) -> StepEstimate:
    """The step's seconds on ``chip``."""
    comms = collective_seconds(stats, chip)
    optimal = optimal_seconds(compiled) if chip.platform == "tpu" else None
    if optimal is not None:
        scale = stats.flops / stats.flops_once if stats.flops_once else 1.0
        method = (
            "estimate: XLA:TPU cost model (optimal_seconds) x loop trip counts, "
            f"FLOP-weighted (x{scale:.2f})"
        )
        if stats.kernel_seconds:
            method += f", + splash attention at its measured rate ({stats.kernel_seconds:.3f} s)"
        return StepEstimate(optimal * scale + stats.kernel_seconds, method, comms)
    link = "ICI" if chip.platform == "tpu" else "NVLink"
    method = (
        f"estimate: roofline at {chip.peak_flops / 1e12:.0f} TFLOP/s bf16"
        + (
            f" ({chip.float32_matmul_flops / 1e12:.0f} for float32 matmuls)"
            if chip.float32_matmul_flops
            else ""
        )
        + f" and {chip.hbm_bandwidth / 1e9:.0f} GB/s HBM per instruction, + collectives at "
        f"{chip.interconnect / 1e9:.0f} GB/s {link} (not overlapped)"
    )
    if stats.kernel_seconds:
        method += f"; splash attention at its measured rate ({stats.kernel_seconds:.3f} s)"
    if chip.platform == "gpu":
        method += f"; {GPU_MEASURED}"
    return StepEstimate(stats.roofline_seconds + comms, method, comms)


def optimal_seconds(compiled: Any) -> float | None:
    costs = compiled.cost_analysis()
    if isinstance(costs, (list, tuple)):
        costs = costs[0] if costs else None
    value = (costs or {}).get("optimal_seconds")
    return float(value) if value and value > 0 else None
