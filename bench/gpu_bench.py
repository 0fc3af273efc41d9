"""Accelerator throughput and MFU: GPT 124M, GPT 350M and Llama 1B in bf16.

For each model, the largest power-of-two batch (up to BENCH_MAX_BATCH) whose step compiles and
runs is timed; MFU is against the chip's peak from theseus's table. Writes JSON to the path in
argv[1] (default bench/results/gpu.json). Run through bench/gpu.sh on a machine with a GPU/TPU.
BENCH_MODELS="gpt:tiny:256" (family:preset:seq_len, comma-separated) runs a CPU smoke test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DEFAULT_MODELS = "gpt:124m:1024,gpt:350m:1024,llama:1b:2048"
STEPS = int(os.environ.get("BENCH_STEPS", "10"))


def build(family: str, preset: str, seq_len: int):
    import jax
    from flax import nnx
    from theseus.core.components import Choice, JobSpec
    from theseus.core.config import ConfigTree
    from theseus.core.optim.build import build_optimizer, build_schedule
    from theseus.core.plugins import registries
    from theseus.core.train.build import build_model
    from theseus.core.train.step import make_train_step

    regs = registries()
    spec = JobSpec(
        "bench",
        "x:y",
        "",
        {
            "model": Choice("models", family),
            "optimizer": Choice("optimizers", "adamw"),
            "schedule": Choice("schedules", "constant"),
        },
    )
    tree = ConfigTree(spec, regs)
    tree.set("model.preset", preset)
    tree.set("model.max_seq_len", max(seq_len, int(tree.node.model.max_seq_len)))
    cfg = tree.node
    vocab = int(cfg.model.vocab_size) or 50304
    model = build_model(regs, cfg.model, vocab, seq_len, jax.random.key(0), "bfloat16")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = build_optimizer(regs, cfg.optimizer, cfg.schedule, 1000)
    schedule = build_schedule(regs, cfg.schedule, cfg.optimizer.learning_rate, 1000)
    step = jax.jit(make_train_step(graphdef, rest, optimizer, schedule, 1, False), donate_argnums=0)
    return model, params, optimizer, step, vocab


def run_one(family: str, preset: str, seq_len: int, max_batch: int) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import jax
    import jax.numpy as jnp
    from synthetic import synthetic_batch, timed_steps
    from theseus.core.train.metrics import device_peak_flops

    model, params, optimizer, step, vocab = build(family, preset, seq_len)
    peak, source = device_peak_flops()
    best = None
    batch_size = max_batch
    while batch_size >= 1:
        try:
            state = {
                "params": jax.tree.map(jnp.copy, params),
                "opt_state": optimizer.init(params),
                "step": jnp.zeros((), jnp.int32),
                "skipped": jnp.zeros((), jnp.int32),
            }
            batch = jax.device_put(synthetic_batch(batch_size, seq_len, vocab))
            start = time.perf_counter()
            state, metrics = step(state, batch)
            metrics["loss"].block_until_ready()
            compile_s = time.perf_counter() - start
            state, metrics, elapsed = timed_steps(step, state, batch, 2, STEPS)
            tps = STEPS * batch_size * seq_len / elapsed
            best = {
                "family": family,
                "preset": preset,
                "seq_len": seq_len,
                "batch": batch_size,
                "tokens_per_sec": tps,
                "step_s": elapsed / STEPS,
                "compile_and_first_step_s": compile_s,
                "flops_per_token": model.flops_per_token(seq_len),
                "peak_flops": peak,
                "peak_source": source,
                "mfu": model.flops_per_token(seq_len) * tps / peak,
                "device": jax.devices()[0].device_kind,
            }
            break
        except Exception as error:  # out of memory: halve the batch
            if "RESOURCE_EXHAUSTED" not in str(error) and "out of memory" not in str(error).lower():
                raise
            batch_size //= 2
    return best or {"family": family, "preset": preset, "error": "no batch size fits"}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "gpu.json")
    max_batch = int(os.environ.get("BENCH_MAX_BATCH", "64"))
    results = []
    for item in os.environ.get("BENCH_MODELS", DEFAULT_MODELS).split(","):
        family, preset, seq_len = item.split(":")
        result = run_one(family, preset, int(seq_len), max_batch)
        results.append(result)
        print(json.dumps(result), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "gpu_train", "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
