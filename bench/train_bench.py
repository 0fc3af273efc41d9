"""Training throughput on CPU: theseus's jitted step against eager PyTorch, in one run.

GPT 6 layers x 384 wide x 6 heads, sequence 256, batch 8, vocab 8192, AdamW, float32.
Prints a table and writes bench/results/train_cpu.json. Usage: python bench/train_bench.py
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

SHAPE = {"n_layers": 6, "d_model": 384, "n_heads": 6, "seq_len": 256, "batch": 8, "vocab": 8192}
STEPS = int(os.environ.get("BENCH_STEPS", "20"))
WARMUP = 3


def theseus_tokens_per_sec() -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from synthetic import synthetic_batch, timed_steps
    from theseus.core.components import Choice, JobSpec
    from theseus.core.config import ConfigTree
    from theseus.core.optim.build import build_optimizer, build_schedule
    from theseus.core.plugins import registries
    from theseus.core.train.build import build_model
    from theseus.core.train.metrics import measure_matmul_peak
    from theseus.core.train.step import make_train_step

    regs = registries()
    spec = JobSpec(
        "bench",
        "x:y",
        "",
        {
            "model": Choice("models", "gpt"),
            "optimizer": Choice("optimizers", "adamw"),
            "schedule": Choice("schedules", "constant"),
        },
    )
    tree = ConfigTree(spec, regs)
    for key, value in {
        "model.n_layers": 6,
        "model.d_model": 384,
        "model.n_heads": 6,
        "model.max_seq_len": SHAPE["seq_len"],
        "optimizer.weight_decay": 0.1,
    }.items():
        tree.set(key, value)
    cfg = tree.node
    model = build_model(regs, cfg.model, SHAPE["vocab"], SHAPE["seq_len"], jax.random.key(0))
    flops_per_token = model.flops_per_token(SHAPE["seq_len"])
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = build_optimizer(regs, cfg.optimizer, cfg.schedule, 1000)
    schedule = build_schedule(regs, cfg.schedule, cfg.optimizer.learning_rate, 1000)
    step = jax.jit(make_train_step(graphdef, rest, optimizer, schedule, 1, False), donate_argnums=0)
    state = {
        "params": params,
        "opt_state": optimizer.init(params),
        "step": jnp.zeros((), jnp.int32),
        "skipped": jnp.zeros((), jnp.int32),
    }
    b, t = SHAPE["batch"], SHAPE["seq_len"]
    batch = synthetic_batch(b, t, SHAPE["vocab"])
    batch = jax.device_put(batch)
    start = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    state, metrics = compiled(state, batch)
    metrics["loss"].block_until_ready()
    first_step_s = time.perf_counter() - start
    state, metrics, elapsed = timed_steps(compiled, state, batch, WARMUP, STEPS)
    tps = STEPS * b * t / elapsed
    peak = measure_matmul_peak(2048)
    return {
        "tokens_per_sec": tps,
        "compile_s": compile_s,
        "first_step_s": first_step_s,
        "flops_per_token": flops_per_token,
        "matmul_peak_flops": peak,
        "mfu": flops_per_token * tps / peak,
        "loss": float(metrics["loss"]),
    }


def torch_tokens_per_sec() -> dict:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from torch_gpt import TorchGPT

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    model = TorchGPT(
        SHAPE["vocab"], SHAPE["seq_len"], SHAPE["n_layers"], SHAPE["d_model"], SHAPE["n_heads"]
    )
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    b, t = SHAPE["batch"], SHAPE["seq_len"]
    tokens = torch.randint(0, SHAPE["vocab"], (b, t + 1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def one_step() -> float:
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(WARMUP):
        one_step()
    start = time.perf_counter()
    for _ in range(STEPS):
        loss = one_step()
    elapsed = time.perf_counter() - start
    return {
        "tokens_per_sec": STEPS * b * t / elapsed,
        "loss": loss,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    ours = theseus_tokens_per_sec()
    baseline = torch_tokens_per_sec()
    result = {
        "benchmark": "train_cpu",
        "shape": SHAPE,
        "steps": STEPS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "theseus": ours,
        "pytorch_eager": baseline,
        "ratio_vs_pytorch": ours["tokens_per_sec"] / baseline["tokens_per_sec"],
    }
    out = Path(__file__).parent / "results" / "train_cpu.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"theseus   {ours['tokens_per_sec']:8.0f} tokens/s  MFU {ours['mfu']:.1%} of measured f32 matmul peak"
    )
    print(
        f"pytorch   {baseline['tokens_per_sec']:8.0f} tokens/s  (eager, {baseline['threads']} threads)"
    )
    print(
        f"ratio     {result['ratio_vs_pytorch']:.2f}x   compile {ours['compile_s']:.1f}s  first step {ours['first_step_s']:.2f}s"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
