"""``theseus run <training job> --dry-run``: mesh, abstract state and per-device memory.

Nothing is allocated: the state is ``jax.eval_shape``'d, the step is lowered and compiled
against abstract arrays, and the compiler's memory analysis gives the temporaries
(activations, gradients, optimizer scratch) of one device. When every mesh axis is given
and JAX has not started yet, CPU runs simulate that many devices.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from theseus.core.errors import TheseusError
from theseus.core.sharding.config import ShardingError, planned_devices

if TYPE_CHECKING:
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

GiB = 1024**3


def simulate_devices(config: TrainJobConfig) -> None:
    """Ask for the mesh's device count on the CPU backend (only before JAX starts)."""
    count = planned_devices(config.sharding)
    if count is None or "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def vocab_size(config: TrainJobConfig, root: str) -> tuple[int, str]:
    if config.model.vocab_size:
        return config.model.vocab_size, "model.vocab_size"
    try:
        from theseus.core.train.setup import open_data

        sized = dataclasses.replace(config.data, verify="size")  # a plan reads no tokens
        return open_data(dataclasses.replace(config, data=sized), root).vocab_size, "tokenized data"
    except TheseusError:  # not tokenized yet: the configured tokenizer size
        return config.data.vocab_size, "data.vocab_size (data not tokenized yet)"


def report(setup: TrainSetup, vocab_source: str = "") -> dict[str, Any]:
    """Per-device bytes of parameters, optimizer state, batch and step temporaries."""
    import jax
    from theseus.core.sharding.mesh import describe
    from theseus.core.sharding.parallel import expert_parameter_bytes
    from theseus.core.sharding.placement import per_device_bytes
    from theseus.core.train.flops import program_flops

    config, layout, state = setup.config, setup.layout, setup.abstract_state
    batch_arrays = setup.abstract_batch()
    started = time.perf_counter()
    compiled = setup.train_step.lower(state, batch_arrays).compile()
    compile_seconds = time.perf_counter() - started
    analysis = compiled.memory_analysis()
    program = program_flops(setup.train_step, state, batch_arrays)
    training = config.training
    out: dict[str, Any] = {
        "mesh": describe(layout.mesh),
        "strategy": config.sharding.strategy,
        "remat": config.sharding.remat,
        "devices": len(layout.mesh.devices.flat),
        "device_kind": layout.mesh.devices.flat[0].device_kind,
        "parameters": sum(
            math.prod(a.shape) for a in jax.tree.leaves((state.params, state.frozen))
        ),
        "trained_parameters": sum(math.prod(a.shape) for a in jax.tree.leaves(state.params)),
        "vocab": f"{setup.model_config.vocab_size} from {vocab_source or 'the data'}",
        "batch": f"{training.global_batch_size} x {training.seq_len} tokens, "
        f"{setup.per_device} per device x {setup.micro_steps} micro-steps"
        + (
            f", each sequence over context={layout.context} ({training.seq_len // layout.context} "
            f"positions per device, {config.sharding.context_order}, "
            f"{config.sharding.context_attention})"
            if layout.context > 1
            else ""
        ),
        "params_bytes": per_device_bytes((state.params, state.frozen)),
        "expert_params_bytes": expert_parameter_bytes((state.params, state.frozen)),
        "context": layout.context,
        "context_attention": config.sharding.context_attention if layout.context > 1 else "",
        "opt_bytes": per_device_bytes(state.opt_state),
        "batch_bytes": per_device_bytes(batch_arrays),
        "attention": setup.attention,
        "compile_seconds": compile_seconds,
        # XLA's cost analysis counts a loop body once (scanned layers: one layer); the
        # program count multiplies loops by their trip counts (theseus.core.train.flops)
        "flops_per_step_compiled": compiled_flops(compiled) * len(layout.mesh.devices.flat),
        "flops_per_step_program": program.flops,
        "program_dynamic_loops": program.dynamic_loops,
        "flops_per_step_model": setup.flops_per_token * setup.tokens_per_step,
    }
    if analysis is not None:
        out["temp_bytes"] = int(analysis.temp_size_in_bytes)
        out["activation_bytes"] = out["temp_bytes"]
        out["argument_bytes"] = int(analysis.argument_size_in_bytes)
        out["output_bytes"] = int(analysis.output_size_in_bytes)
        out["alias_bytes"] = int(analysis.alias_size_in_bytes)
        out["total_bytes"] = (
            out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
        )
    stats = layout.mesh.devices.flat[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        out["device_bytes"] = int(stats["bytes_limit"])
    return out


def compiled_flops(compiled: Any) -> float:
    """FLOPs of one device's compiled program, from XLA's cost analysis (0 when absent)."""
    costs = compiled.cost_analysis()
    if isinstance(costs, (list, tuple)):  # one entry per program in some jax versions
        return float(sum(c.get("flops", 0.0) for c in costs if c))
    return float((costs or {}).get("flops", 0.0))


def format_report(r: dict[str, Any]) -> str:
    def size(n: int) -> str:
        if n >= GiB / 10:
            return f"{n / GiB:9.3f} GiB"
        return f"{n / 1024**2:9.1f} MiB" if n >= 1024**2 else f"{n / 1024:9.1f} KiB"

    lines = [
        f"mesh        {r['mesh']} ({r['devices']} x {r['device_kind']}), strategy {r['strategy']}, "
        f"remat {r['remat']}",
        f"model       {r['parameters'] / 1e6:.1f}M parameters, vocab {r['vocab']}",
        f"batch       {r['batch']}",
        "per device:",
        f"  parameters             {size(r['params_bytes'])}",
        *(
            [f"    of which experts     {size(r['expert_params_bytes'])}"]
            if r.get("expert_params_bytes")
            else []
        ),
        f"  optimizer state        {size(r['opt_bytes'])}",
        f"  batch                  {size(r['batch_bytes'])}",
    ]
    lines.append(
        f"compute     {r['flops_per_step_model'] / 1e9:.3g} GFLOP/step (model), "
        f"{r['flops_per_step_program'] / 1e9:.3g} GFLOP/step (traced program), "
        f"compiled in {r['compile_seconds']:.1f} s, attention {r['attention']}"
    )
    if "temp_bytes" in r:
        lines += [
            f"  activations + temps    {size(r['temp_bytes'])}   (compiled step, memory analysis)",
            f"  total                  {size(r['total_bytes'])}   (arguments + outputs - donated + temps)",
        ]
    else:
        lines.append("  activations            n/a (the backend gives no memory analysis)")
    if "device_bytes" in r:
        lines.append(f"  device memory          {size(r['device_bytes'])}")
    return "\n".join(lines)


def dry_run(config: TrainJobConfig, root: str, as_json: bool = False) -> dict[str, Any]:
    simulate_devices(config)
    from theseus.core.plugins import registries
    from theseus.core.train.setup import TrainSetup

    vocab, source = vocab_size(config, root)
    result = report(TrainSetup.build(config, registries(), vocab), source)
    print(json.dumps(result, sort_keys=True) if as_json else format_report(result))
    total, limit = result.get("total_bytes"), result.get("device_bytes")
    if total and limit and total > limit:
        raise ShardingError(
            f"the step needs {total / GiB:.2f} GiB per device but a device has {limit / GiB:.2f} "
            "GiB: shard more (sharding.strategy=fsdp), use sharding.remat or a smaller batch"
        )
    return result
