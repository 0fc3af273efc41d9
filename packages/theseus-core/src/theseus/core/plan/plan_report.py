"""The plan of a training step on its mesh: memory per chip, whether it fits, FLOPs,
collectives and (on a known chip) an estimate of the step time. Nothing is allocated.

The step is lowered against abstract arrays and compiled; the compiler's memory analysis
gives one chip's arguments, outputs and temporaries, the compiled HLO (``hlo_stats``) its
FLOPs, bytes and collectives with loops counted as often as they run, and
``step_estimate`` the time. XLA:TPU refuses to compile a program larger than the chip's HBM
(``RESOURCE_EXHAUSTED``): its message gives what the program needs, reported as the peak.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from typing import Any

import jax
from theseus.core.chips.devices import is_compile_only, without_disk_cache
from theseus.core.chips.specs import chip_of_device_kind
from theseus.core.plan.flops import program_flops
from theseus.core.plan.hlo_stats import analyze
from theseus.core.plan.step_estimate import estimate_step, splash_pricer
from theseus.core.sharding.mesh import describe
from theseus.core.sharding.parallel import expert_parameter_bytes
from theseus.core.sharding.placement import per_device_bytes
from theseus.core.train.remat_choice import device_memory_bytes

GiB = 1024**3
_OOM_NUMBERS = (  # XLA:TPU's wordings of "needs X of Y"
    re.compile(r"\(([\d.]+)([KMGT])\) exceeds available HBM \(([\d.]+)([KMGT])\)"),
    re.compile(r"Used ([\d.]+)([KMGT]) of ([\d.]+)([KMGT]) hbm"),
)
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def compile_step(setup: Any) -> tuple[Any, float, int | None]:
    """(compiled step or None, compile seconds, bytes the compiler said it needs when it
    refused for memory)."""

    started = time.perf_counter()
    device = setup.layout.mesh.devices.flat[0]
    try:
        lowered = setup.train_step.lower(setup.abstract_state, setup.abstract_batch())
        with without_disk_cache() if is_compile_only(device) else contextlib.nullcontext():
            compiled = lowered.compile()
    except Exception as error:  # XLA:TPU: RESOURCE_EXHAUSTED at compile time
        needed = out_of_memory_bytes(str(error))
        if needed is None:
            raise
        return None, time.perf_counter() - started, needed
    return compiled, time.perf_counter() - started, None


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


def report(setup: Any, vocab_source: str = "", target: str = "") -> dict[str, Any]:
    """The plan as one flat dict (what ``--dry-run --json`` prints)."""

    config, layout, state = setup.config, setup.layout, setup.abstract_state
    batch = setup.abstract_batch()
    devices = list(layout.mesh.devices.flat)
    chip = chip_of_device_kind(layout.device_kind)
    compiled, seconds, needed = compile_step(setup)
    with jax.set_mesh(layout.mesh):  # the kernels read the mesh when traced
        program = program_flops(setup.train_step.jitted, state, batch)
    training = config.training
    out: dict[str, Any] = {
        "target": target or None,
        "mesh": describe(layout.mesh),
        "strategy": config.sharding.strategy,
        "remat": setup.remat.level,
        "remat_reason": setup.remat.reason,
        "loss_chunks": setup.loss_chunks,
        "devices": len(devices),
        "hosts": len({d.process_index for d in devices}),
        "device_kind": layout.device_kind,
        "platform": layout.platform,
        "parameters": sum(
            math.prod(a.shape) for a in jax.tree.leaves((state.params, state.frozen))
        ),
        "trained_parameters": sum(math.prod(a.shape) for a in jax.tree.leaves(state.params)),
        "vocab": f"{setup.model_config.vocab_size} from {vocab_source or 'the data'}",
        "batch": f"{training.global_batch_size} x {training.seq_len} tokens, "
        f"{setup.per_device} per device x {setup.micro_steps} micro-steps" + context_split(setup),
        "per_device_batch": setup.per_device,
        "micro_steps": setup.micro_steps,
        "params_bytes": per_device_bytes((state.params, state.frozen)),
        "expert_params_bytes": expert_parameter_bytes((state.params, state.frozen)),
        "context": layout.context,
        "context_attention": config.sharding.context_attention if layout.context > 1 else "",
        "opt_bytes": per_device_bytes(state.opt_state),
        "batch_bytes": per_device_bytes(batch),
        "attention": setup.attention,
        "dtype": str(getattr(setup.model_config, "dtype", "")),
        "compile_seconds": seconds,
        "flops_per_step_model": setup.flops_per_token * setup.tokens_per_step,
        "flops_per_step_program": program.flops,
        "program_dynamic_loops": program.dynamic_loops,
    }
    out.update(memory(compiled, needed))
    hbm = device_memory_bytes(devices[0])
    if hbm is not None:
        out["hbm_bytes"] = hbm
        out["device_bytes"] = hbm
    if hbm is not None and "peak_bytes" in out:
        out["fits"] = out["peak_bytes"] <= hbm
        out["over_bytes"] = max(0, out["peak_bytes"] - hbm)
    elif needed is not None:
        out["fits"] = False  # refused for memory, amount not given
    if compiled is None:
        return out
    text = compiled.as_text()
    stats = analyze(
        text,
        chip.peak_flops if chip else 0.0,
        chip.hbm_bandwidth if chip else 0.0,
        chip.float32_matmul_flops if chip else 0.0,
        splash_pricer(text, layout.device_kind),
    )
    out["flops_per_step_compiled"] = compiled_flops(compiled) * len(devices)
    out["flops_per_step_hlo"] = stats.flops * len(devices)
    out["hlo_dynamic_loops"] = stats.dynamic_loops
    out["opaque_kernels"] = stats.opaque_kernels
    out["collective_bytes"] = {k: int(v) for k, v in sorted(stats.collective_bytes.items())}
    out["collective_bytes_total"] = int(sum(stats.collective_bytes.values()))
    if chip is not None:
        estimate = estimate_step(compiled, stats, chip)
        out["step_seconds_estimate"] = estimate.seconds
        out["estimate_by_kind"] = stats.seconds_by_kind
        out["estimate_method"] = estimate.method
        out["collective_seconds_estimate"] = estimate.collective_seconds
        peak = chip.peak_flops * len(devices)
        out["predicted_mfu"] = out["flops_per_step_model"] / (estimate.seconds * peak)
        out["peak_flops_per_chip"] = chip.peak_flops
    return out


def context_split(setup: Any) -> str:
    """How each sequence is split over ``context`` (empty when it is not)."""
    layout, sharding = setup.layout, setup.config.sharding
    if layout.context == 1:
        return ""
    positions = setup.config.training.seq_len // layout.context
    return (
        f", each sequence over context={layout.context} ({positions} positions per device, "
        f"{sharding.context_order}, {sharding.context_attention})"
    )


def compiled_flops(compiled: Any) -> float:
    """FLOPs of one device's compiled program, from XLA's cost analysis (0 when absent; a
    loop body counted once)."""
    costs = compiled.cost_analysis()
    if isinstance(costs, (list, tuple)):
        return float(sum(c.get("flops", 0.0) for c in costs if c))
    return float((costs or {}).get("flops", 0.0))
