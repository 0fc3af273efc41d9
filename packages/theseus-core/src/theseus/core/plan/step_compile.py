"""One compile of a training setup's step for the plan: traced once, lowered, compiled.

The trace gives both the lowered program and the jaxpr whose matmul FLOPs the plan counts
(``flops.jaxpr_flops``), so the step is traced once per compile. Each stage says what it is
doing while it runs (``progress.Progress``) and is timed. XLA:TPU refuses to compile a
program larger than the chip's HBM (``RESOURCE_EXHAUSTED``), usually within seconds: the
bytes its message gives are kept as what the program needs, and the compile counts as
refused rather than failed.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

import jax
from theseus.core.chips.devices import is_compile_only, without_disk_cache
from theseus.core.plan.progress import Progress

_OOM_NUMBERS = (  # XLA:TPU's wordings of "needs X of Y"
    re.compile(r"\(([\d.]+)([KMGT])\) exceeds available HBM \(([\d.]+)([KMGT])\)"),
    re.compile(r"Used ([\d.]+)([KMGT]) of ([\d.]+)([KMGT]) hbm"),
)
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
COMPILERS = {"tpu": "XLA:TPU", "gpu": "XLA:GPU", "cuda": "XLA:GPU", "cpu": "XLA:CPU"}


@dataclass
class StepCompile:
    """A compiled step (None when the compiler refused it for memory) and what it took."""

    compiled: Any
    jaxpr: Any  # the traced step (a ClosedJaxpr)
    needed: int | None  # bytes the compiler said the program needs, when it refused
    lower_seconds: float  # tracing and lowering to StableHLO
    compile_seconds: float  # XLA's compile (or refusal)


def compile_step(setup: Any, what: str = "the step") -> StepCompile:
    """Trace, lower and compile ``setup``'s train step, saying so on the way (``what``
    names it in the progress lines: "the step for v5e-8")."""
    layout = setup.layout
    device = layout.mesh.devices.flat[0]
    compiler = COMPILERS.get(layout.platform, f"XLA:{layout.platform.upper()}")
    with Progress(f"tracing and lowering {what}") as lowering:
        traced = setup.train_step.trace(setup.abstract_state, setup.abstract_batch())
        with jax.set_mesh(layout.mesh):  # the kernels read the mesh when lowered
            lowered = traced.lower()
    needed: int | None = None
    with Progress(f"compiling {what} with {compiler}") as compiling:
        try:
            with without_disk_cache() if is_compile_only(device) else contextlib.nullcontext():
                compiled = lowered.compile()
        except Exception as error:  # XLA:TPU: RESOURCE_EXHAUSTED at compile time
            needed = out_of_memory_bytes(str(error))
            if needed is None:
                raise
            compiled = None
            compiling.outcome = "refused: out of memory" + (
                f", needs {needed / 1024**3:.2f} GiB" if needed > 0 else ""
            )
    return StepCompile(compiled, traced.jaxpr, needed, lowering.seconds, compiling.seconds)


def out_of_memory_bytes(message: str) -> int | None:
    """What a program needs, from the compiler's out-of-memory message (None otherwise)."""
    if "RESOURCE_EXHAUSTED" not in message:
        return None
    for pattern in _OOM_NUMBERS:
        found = pattern.search(message)
        if found:
            return int(float(found.group(1)) * _UNITS[found.group(2)])
    return -1  # out of memory, amount not given


def memory(compiled: Any, needed: int | None) -> dict[str, int]:
    """Per-chip bytes: arguments, outputs, temporaries and the peak (arguments + outputs -
    donated + temporaries + code)."""
    if compiled is None:
        return {"peak_bytes": needed} if needed and needed > 0 else {}
    analysis = compiled.memory_analysis()
    if analysis is None:
        return {}
    out = {
        "argument_bytes": int(analysis.argument_size_in_bytes),
        "output_bytes": int(analysis.output_size_in_bytes),
        "alias_bytes": int(analysis.alias_size_in_bytes),
        "temp_bytes": int(analysis.temp_size_in_bytes),
        "code_bytes": int(analysis.generated_code_size_in_bytes),
    }
    out["activation_bytes"] = out["temp_bytes"]
    out["total_bytes"] = (
        out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
    )
    out["peak_bytes"] = out["total_bytes"] + out["code_bytes"]
    return out
