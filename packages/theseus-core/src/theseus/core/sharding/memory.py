"""``theseus run <training job> --dry-run``: mesh, abstract state and per-device memory.

Nothing is allocated: the state is ``jax.eval_shape``'d, the step is lowered and compiled
against abstract arrays, and the compiler's memory analysis gives the temporaries
(activations, gradients, optimizer scratch) of one device. When every mesh axis is given
and JAX has not started yet, CPU runs simulate that many devices.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from theseus.core.sharding.config import ShardingError, planned_devices

GiB = 1024**3


def simulate_devices(config: Any) -> None:
    """Ask for the mesh's device count on the CPU backend (only before JAX starts)."""
    count = planned_devices(config.sharding)
    if count is None or "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def vocab_size(config: Any, root: str) -> tuple[int, str]:
    if int(config.model.vocab_size):
        return int(config.model.vocab_size), "model.vocab_size"
    try:
        from theseus.core.data.api import open_training_data

        data = open_training_data(
            root,
            config.data,
            seq_len=int(config.training.seq_len),
            global_batch_size=int(config.training.global_batch_size),
            seed=0,
        )
        return int(data.vocab_size), "tokenized data"
    except Exception:  # not tokenized yet: the configured tokenizer size
        return int(config.data.vocab_size), "data.vocab_size (data not tokenized yet)"


def report(config: Any, root: str) -> dict[str, Any]:
    """Per-device bytes of parameters, optimizer state, batch and step temporaries."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from theseus.core.optim.build import build_optimizer, build_schedule
    from theseus.core.plugins import registries
    from theseus.core.sharding.config import check_remat
    from theseus.core.sharding.mesh import describe
    from theseus.core.sharding.placement import Layout, per_device_bytes
    from theseus.core.train.build import build_model
    from theseus.core.train.step import make_train_step
    from theseus.core.train.trainer import plan_batches, total_steps

    regs = registries()
    training = config.training
    layout = Layout(config.sharding)
    per_device, micro_steps = plan_batches(training, layout.batch_shards)
    vocab, vocab_source = vocab_size(config, root)
    seq_len, batch = int(training.seq_len), int(training.global_batch_size)
    steps = total_steps(training)
    optimizer = build_optimizer(regs, config.optimizer, config.schedule, steps)
    schedule = build_schedule(regs, config.schedule, config.optimizer.learning_rate, steps)

    def build() -> Any:
        key = jax.random.key(int(training.seed))
        return build_model(regs, config.model, vocab, seq_len, key, config.precision.compute_dtype)

    def fresh() -> dict:
        _, params, _ = nnx.split(build(), nnx.Param, ...)
        zero = jnp.zeros((), jnp.int32)
        return {
            "params": params,
            "opt_state": optimizer.init(params),
            "step": zero,
            "skipped": zero,
        }

    graphdef, _, rest = nnx.split(nnx.eval_shape(build), nnx.Param, ...)
    abstract = jax.eval_shape(fresh)
    shardings = layout.state_shardings(abstract)  # refuses shapes the mesh does not divide
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    batch_arrays = {
        name: jax.ShapeDtypeStruct((batch, seq_len), dtype, sharding=layout.batch_sharding)
        for name, dtype in [
            ("inputs", np.int32),
            ("targets", np.int32),
            ("positions", np.int32),
            ("segment_ids", np.int32),
            ("loss_mask", np.float32),
        ]
    }
    step = make_train_step(
        graphdef,
        rest,
        optimizer,
        schedule,
        micro_steps,
        bool(training.skip_nonfinite),
        micro_sharding=layout.micro_sharding(),
        grad_shardings=layout.grad_shardings(abstract),
        remat=check_remat(config.sharding),
    )
    compiled = layout.jit_step(step, shardings).lower(state, batch_arrays).compile()
    analysis = compiled.memory_analysis()
    out: dict[str, Any] = {
        "mesh": describe(layout.mesh),
        "strategy": str(config.sharding.strategy),
        "remat": str(config.sharding.remat),
        "devices": len(layout.mesh.devices.flat),
        "device_kind": layout.mesh.devices.flat[0].device_kind,
        "parameters": sum(math.prod(a.shape) for a in jax.tree.leaves(abstract["params"])),
        "vocab": f"{vocab} from {vocab_source}",
        "batch": f"{batch} x {seq_len} tokens, {per_device} per device x {micro_steps} micro-steps",
        "params_bytes": per_device_bytes(state["params"]),
        "opt_bytes": per_device_bytes(state["opt_state"]),
        "batch_bytes": per_device_bytes(batch_arrays),
    }
    if analysis is not None:
        out["temp_bytes"] = int(analysis.temp_size_in_bytes)
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
        f"  optimizer state        {size(r['opt_bytes'])}",
        f"  batch                  {size(r['batch_bytes'])}",
    ]
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


def dry_run(config: Any, root: str) -> dict[str, Any]:
    simulate_devices(config)
    result = report(config, root)
    print(format_report(result))
    total, limit = result.get("total_bytes"), result.get("device_bytes")
    if total and limit and total > limit:
        raise ShardingError(
            f"the step needs {total / GiB:.2f} GiB per device but a device has {limit / GiB:.2f} "
            "GiB: shard more (sharding.strategy=fsdp), use sharding.remat or a smaller batch"
        )
    return result
