"""Accelerator throughput and MFU: GPT 124M, GPT 350M and Llama 1B in bf16.

For each model, the largest power-of-two batch (up to BENCH_MAX_BATCH) whose step compiles and
runs is timed; MFU is against the chip's peak from theseus's table. Writes JSON to the path in
argv[1] (default bench/results/gpu.json). Run through bench/gpu.sh on a machine with a GPU/TPU.
BENCH_MODELS="gpt:tiny:256" (family:preset:seq_len[:max_batch], comma-separated) runs a CPU smoke
test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

DEFAULT_MODELS = "gpt:124m:1024,gpt:350m:1024,llama:1b:2048"
STEPS = int(os.environ.get("BENCH_STEPS", "10"))


def config_tree(family: str, preset: str, seq_len: int):
    """(config tree of ``<family>/train/pretrain`` in bf16, registries, vocabulary size)."""
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec

    regs = registries()
    overrides = [
        f"model.preset={preset}",
        f"training.seq_len={seq_len}",
        "precision.compute_dtype=bfloat16",
        "optimizer.name=adamw",
        "schedule.name=constant",
    ]
    tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, overrides)
    tree.set("model.max_seq_len", max(seq_len, int(tree.get("model.max_seq_len"))))
    vocab = int(os.environ.get("BENCH_VOCAB", "0")) or int(tree.get("model.vocab_size")) or 50304
    tree.set("model.vocab_size", vocab)  # BENCH_VOCAB replaces a preset's vocabulary
    return tree, regs, vocab


def run_one(family: str, preset: str, seq_len: int, max_batch: int) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import jax
    from synthetic import synthetic_batch, timed_steps
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.metrics import device_peak_flops
    from theseus.core.train.setup import TrainSetup

    tree, regs, vocab = config_tree(family, preset, seq_len)
    peak, source = device_peak_flops()
    devices = jax.device_count()
    best = None
    batch_size = max_batch
    while batch_size >= devices:
        try:
            tree.set("training.global_batch_size", batch_size)
            setup = TrainSetup.build(tree.to_object(TrainJobConfig), regs, vocab)
            state = setup.init_state()
            batch = setup.layout.place_batch(synthetic_batch(batch_size, seq_len, vocab))
            start = time.perf_counter()
            state, metrics = setup.train_step(state, batch)
            metrics["loss"].block_until_ready()
            compile_s = time.perf_counter() - start
            state, metrics, elapsed = timed_steps(setup.train_step, state, batch, 2, STEPS)
            tps = STEPS * batch_size * seq_len / elapsed
            best = {
                "family": family,
                "preset": preset,
                "seq_len": seq_len,
                "batch": batch_size,
                "tokens_per_sec": tps,
                "step_s": elapsed / STEPS,
                "compile_and_first_step_s": compile_s,
                "flops_per_token": setup.flops_per_token,
                "peak_flops": peak,
                "peak_source": source,
                "devices": devices,
                "mfu": setup.flops_per_token * tps / (peak * devices),
                "attention": setup.attention,
                "micro_steps": setup.micro_steps,
                "device": jax.devices()[0].device_kind,
            }
            break
        except Exception as error:  # out of memory: halve the batch
            if "RESOURCE_EXHAUSTED" not in str(error) and "out of memory" not in str(error).lower():
                raise
            state = batch = None
            batch_size //= 2
    return best or {"family": family, "preset": preset, "error": "no batch size fits"}


def measured_bf16_peak(size: int = 8192, repeats: int = 10) -> float:
    """FLOP/s of a jitted bf16 ``a @ b`` at ``size``^3 on random data, mean of ``repeats``."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(key, (size, size), jnp.bfloat16) for key in keys)
    matmul = jax.jit(lambda x, y: x @ y)
    for _ in range(3):
        matmul(a, b).block_until_ready()
    start = time.perf_counter()
    for _ in range(repeats):
        out = matmul(a, b)
    out.block_until_ready()
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def main() -> None:
    """Each model's result is printed and the JSON rewritten as soon as it is measured."""
    import jax

    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "gpu.json")
    max_batch = int(os.environ.get("BENCH_MAX_BATCH", "64"))
    report: dict = {"benchmark": "gpu_train", "jax": jax.__version__, "results": []}
    if jax.devices()[0].platform != "cpu":
        report["measured_bf16_matmul_flops"] = measured_bf16_peak()
        print(f"bf16 matmul: {report['measured_bf16_matmul_flops'] / 1e12:.0f} TFLOP/s", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    for item in os.environ.get("BENCH_MODELS", DEFAULT_MODELS).split(","):
        family, preset, seq_len, *batch = item.split(":")
        result = run_one(family, preset, int(seq_len), int(batch[0]) if batch else max_batch)
        if "mfu" in result and "measured_bf16_matmul_flops" in report:
            result["mfu_of_measured_matmul"] = (
                result["mfu"] * result["peak_flops"] / report["measured_bf16_matmul_flops"]
            )
        report["results"].append(result)
        print(json.dumps(result), flush=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
