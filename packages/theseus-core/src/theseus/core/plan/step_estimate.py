"""How long one step would take on its chip: an estimate from the compiled program, no chip.

One method on every chip, TPU and GPU alike: a **roofline** over the compiled HLO. Each
instruction takes ``max(FLOPs / peak bf16 FLOP/s, bytes / HBM bandwidth)`` (the chip's
published peaks, ``chips.specs``; float32 matmuls at the chip's TF32 rate where it has one),
loops times their trip counts; each splash attention call (opaque to XLA) at the rate
measured for it (``chips.kernel_rates``); ``ragged_dot``'s grouped-matmul kernel by its
FLOPs counted from its shapes (``hlo_stats``: each row through one group), at the peak like
XLA's own matmuls (no rate of the kernel alone is measured; the step that runs it is, in
``measured.json``'s ``moe_grouping`` table); plus the part of the collectives' time (bytes over
the chip's ICI or NVLink bandwidth; an all-reduce moves its bytes twice, reduce-scatter then
all-gather) that the compiled schedule does not hide behind compute (``overlap``: a
collective started before some compute and waited for after it is hidden by that compute's
time). The collective time is reported whole, hidden and exposed.

Why not XLA:TPU's own cost model (``cost_analysis()["optimal_seconds"]``), which earlier
versions used on TPUs: it prices a loop body once, and at real sizes it gives no usable time
(a 1B Llama step compiled for v5e-8: -46 s), so the estimate fell back to the roofline for
some programs and not others, on the same chip. The roofline is what was checked against a
real chip (a v5e: every bench shape within +-25%, docs/targets.md) and a real GPU (an H200:
measured / estimated 1.53-1.63).

It is an estimate (no autotuning, no measured kernel but splash), labelled so wherever it is
shown; ``bench/gpu.sh`` and ``bench/tpu_device.sh`` measure the real step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.chips.kernel_rates import UNITS, rate_source, splash_rate
from theseus.core.chips.specs import Chip
from theseus.core.plan.hlo_stats import HloStats
from theseus.core.plan.overlap import hidden, overlap


@dataclass
class StepEstimate:
    seconds: float  # compute + exposed collectives
    method: str
    collective_seconds: float  # all of it: hidden + exposed
    exposed_seconds: float  # what the cores wait for

    @property
    def hidden_seconds(self) -> float:
        return hidden(self.collective_seconds, self.exposed_seconds)


# What a real GPU did against this roofline (docs/targets.md, "Measured on a GPU").
GPU_MEASURED = "on an H200, GPT 124M-Llama 1B steps took 1.53-1.63x this estimate"


def splash_pricer(text: str, device_kind: str) -> Any:
    """``kernel_time(instruction, shapes)`` for ``hlo_stats.analyze``: seconds of each splash
    attention call of the module ``text`` at the chip's rate (``kernel_rates``); None for
    other instructions, or on a chip that is no TPU."""
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


def estimate_step(text: str, stats: HloStats, chip: Chip) -> StepEstimate:
    """The step's seconds on ``chip`` for the compiled module ``text`` (``stats``: its
    ``hlo_stats.analyze`` at this chip's peaks): the roofline (module docstring), named."""
    step = overlap(text, stats, chip.interconnect)
    link = "ICI" if chip.platform == "tpu" else "NVLink"
    float32 = chip.float32_matmul_flops
    method = (
        f"estimate: roofline at {chip.peak_flops / 1e12:.0f} TFLOP/s bf16"
        + (f" ({float32 / 1e12:.0f} for float32 matmuls)" if float32 else "")
        + f" and {chip.hbm_bandwidth / 1e9:.0f} GB/s HBM per instruction, + collectives at "
        f"{chip.interconnect / 1e9:.0f} GB/s {link} where the schedule leaves them exposed"
    )
    if stats.kernel_seconds:
        kernels = f"{stats.kernel_seconds * 1e3:.3g} ms"
        method += f"; splash attention ({kernels}) at {rate_source(chip.device_kind)}"
    if chip.platform == "gpu":
        method += f"; {GPU_MEASURED}"
    return StepEstimate(step.seconds, method, step.collective_seconds, step.exposed_seconds)
