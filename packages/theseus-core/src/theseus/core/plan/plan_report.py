"""The plan of a training step on its mesh: memory per chip, whether it fits, FLOPs,
collectives and (on a known chip) an estimate of the step time. Nothing is allocated.

The step is traced, lowered against abstract arrays and compiled once (``step_compile``);
the compiler's memory analysis gives one chip's arguments, outputs and temporaries, the
compiled HLO (``hlo_stats``) its FLOPs, bytes and collectives with loops counted as often as
they run, and ``step_estimate`` the time. XLA:TPU refuses to compile a program larger than
the chip's HBM (``RESOURCE_EXHAUSTED``): its message gives what the program needs, reported
as the peak. Each stage says what it does while it runs and is timed (``progress``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
from theseus.core.chips.specs import Chip, chip_of_device_kind
from theseus.core.plan.flops import jaxpr_flops
from theseus.core.plan.hlo_stats import analyze
from theseus.core.plan.progress import Clock
from theseus.core.plan.step_compile import StepCompile, compile_step, memory
from theseus.core.plan.step_estimate import estimate_step, splash_pricer
from theseus.core.sharding.mesh import describe
from theseus.core.sharding.parallel import expert_parameter_bytes
from theseus.core.sharding.placement import per_device_bytes
from theseus.core.train.remat_choice import device_memory_bytes

GiB = 1024**3


def step_name(setup: Any, target: str = "") -> str:
    """What the progress lines call the step: "the step for v5e-8 (8 x TPU v5 lite)"."""
    layout = setup.layout
    where = target or "this machine"
    return f"the step for {where} ({layout.mesh.devices.size} x {layout.device_kind})"


def report(
    setup: Any, vocab_source: str = "", target: str = "", clock: Clock | None = None
) -> dict[str, Any]:
    """The plan as one flat dict (what ``--dry-run --json`` prints); ``clock`` takes the
    seconds of lowering, compiling and reading the compiled program."""

    clock = clock or Clock()
    devices = list(setup.layout.mesh.devices.flat)
    chip = chip_of_device_kind(setup.layout.device_kind)
    step = compile_step(setup, step_name(setup, target))
    clock.add("lowering", step.lower_seconds)
    clock.add("compiling", step.compile_seconds)
    with clock.part("analysis", "reading the compiled program: FLOPs, collectives, step time"):
        return _analysis(setup, step, chip, devices, vocab_source, target)


def _analysis(
    setup: Any,
    step: StepCompile,
    chip: Chip | None,
    devices: list[Any],
    vocab_source: str,
    target: str,
) -> dict[str, Any]:
    """The plan's dict from one compile of the step (``report``)."""
    config, layout, state = setup.config, setup.layout, setup.abstract_state
    batch = setup.abstract_batch()
    compiled, needed = step.compiled, step.needed
    program = jaxpr_flops(step.jaxpr)
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
        "execution": setup.execution.lines(),
        "dtype": setup.execution.compute_dtype,
        "lower_seconds": step.lower_seconds,
        "compile_seconds": step.compile_seconds,
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
    out.update(compiled_fields(compiled, setup, chip))
    return out


def compiled_fields(compiled: Any, setup: Any, chip: Chip | None) -> dict[str, Any]:
    """What the compiled program says: FLOPs, collectives and, on a known chip, the step
    time estimated and the predicted MFU."""
    layout = setup.layout
    devices = layout.mesh.devices.size
    text = compiled.as_text()
    stats = analyze(
        text,
        chip.peak_flops if chip else 0.0,
        chip.hbm_bandwidth if chip else 0.0,
        chip.float32_matmul_flops if chip else 0.0,
        splash_pricer(text, layout.device_kind),
    )
    out: dict[str, Any] = {
        "flops_per_step_compiled": compiled_flops(compiled) * devices,
        "flops_per_step_hlo": stats.flops * devices,
        "hlo_dynamic_loops": stats.dynamic_loops,
        "opaque_kernels": stats.opaque_kernels,
        "collective_bytes": {k: int(v) for k, v in sorted(stats.collective_bytes.items())},
        "collective_bytes_total": int(sum(stats.collective_bytes.values())),
    }
    if chip is not None:
        estimate = estimate_step(text, stats, chip)
        out["step_seconds_estimate"] = estimate.seconds
        out["estimate_by_kind"] = stats.seconds_by_kind
        out["estimate_method"] = estimate.method
        out["collective_seconds_estimate"] = estimate.collective_seconds
        out["collective_seconds_hidden"] = estimate.hidden_seconds
        out["collective_seconds_exposed"] = estimate.exposed_seconds
        model_flops = setup.flops_per_token * setup.tokens_per_step
        out["predicted_mfu"] = model_flops / (estimate.seconds * chip.peak_flops * devices)
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
