"""Training throughput on CPU: theseus's jitted step against eager PyTorch, in one run.

GPT 6 layers x 384 wide x 6 heads, sequence 256, batch 8, vocab 8192, AdamW, float32.
This machine is a shared VM whose speed drifts by +-15% within minutes, so the two sides
run in alternating rounds (``ROUNDS`` of ``STEPS`` steps each) and the ratio is the median
of the per-round ratios. The matmul peak is measured the same way, for JAX and for PyTorch;
MFU is quoted against both. Writes bench/results/train_cpu.json.
Usage: python bench/train_bench.py   (BENCH_ROUNDS, BENCH_STEPS to change the defaults)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

SHAPE = {"n_layers": 6, "d_model": 384, "n_heads": 6, "seq_len": 256, "batch": 8, "vocab": 8192}
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
STEPS = int(os.environ.get("BENCH_STEPS", "5"))
WARMUP = 3
PEAK_SIZE = 2048


def theseus_side() -> tuple[Callable[[int], float], dict, Callable[[], float]]:
    """(run n steps -> seconds, facts, one matmul -> seconds) for the theseus step."""
    import jax
    import jax.numpy as jnp
    from synthetic import synthetic_batch
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    b, t, vocab = SHAPE["batch"], SHAPE["seq_len"], SHAPE["vocab"]
    overrides = {
        "model.n_layers": SHAPE["n_layers"],
        "model.d_model": SHAPE["d_model"],
        "model.n_heads": SHAPE["n_heads"],
        "model.max_seq_len": t,
        "training.seq_len": t,
        "training.global_batch_size": b,
        "optimizer.name": "adamw",
        "optimizer.weight_decay": 0.1,
        "schedule.name": "constant",
    }
    tree = config_for(
        job_spec("gpt/train/pretrain", regs), regs, [f"{k}={v}" for k, v in overrides.items()]
    )
    setup = TrainSetup.build(tree.to_object(TrainJobConfig), regs, vocab)
    state = setup.init_state()
    batch = setup.layout.place_batch(synthetic_batch(b, t, vocab))
    start = time.perf_counter()
    compiled = setup.train_step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    state, metrics = compiled(state, batch)
    metrics["loss"].block_until_ready()
    facts = {
        "compile_s": compile_s,
        "first_step_s": time.perf_counter() - start,
        "flops_per_token": setup.flops_per_token,
    }
    holder = {"state": state, "metrics": metrics}

    def run(n: int) -> float:
        state = holder["state"]
        start = time.perf_counter()
        for _ in range(n):
            state, metrics = compiled(state, batch)
        metrics["loss"].block_until_ready()
        holder.update(state=state, metrics=metrics)
        return time.perf_counter() - start

    a = jnp.ones((PEAK_SIZE, PEAK_SIZE), jnp.float32)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, a).block_until_ready()

    def one_matmul() -> float:
        start = time.perf_counter()
        matmul(a, a).block_until_ready()
        return time.perf_counter() - start

    facts["last_loss"] = lambda: float(holder["metrics"]["loss"])
    return run, facts, one_matmul


def torch_side() -> tuple[Callable[[int], float], dict, Callable[[], float]]:
    """The same for a plain eager PyTorch GPT with the same optimizer and clipping."""
    import torch
    from torch_gpt import TorchGPT

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    s = SHAPE
    model = TorchGPT(s["vocab"], s["seq_len"], s["n_layers"], s["d_model"], s["n_heads"])
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["seq_len"] + 1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    holder = {"loss": float("nan")}

    def one_step() -> None:
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        holder["loss"] = loss.item()

    for _ in range(WARMUP):
        one_step()

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            one_step()
        return time.perf_counter() - start

    a = torch.ones(PEAK_SIZE, PEAK_SIZE)
    a @ a

    def one_matmul() -> float:
        start = time.perf_counter()
        a @ a
        return time.perf_counter() - start

    return (
        run,
        {"threads": torch.get_num_threads(), "last_loss": lambda: holder["loss"]},
        one_matmul,
    )


def main() -> None:
    ours_run, ours, ours_matmul = theseus_side()
    ours_run(WARMUP)
    theirs_run, theirs, theirs_matmul = torch_side()
    tokens = STEPS * SHAPE["batch"] * SHAPE["seq_len"]
    rounds = []
    for _ in range(ROUNDS):
        ours_tps = tokens / ours_run(STEPS)
        theirs_tps = tokens / theirs_run(STEPS)
        flops = 2 * PEAK_SIZE**3
        jax_peak = flops / min(ours_matmul() for _ in range(3))
        torch_peak = flops / min(theirs_matmul() for _ in range(3))
        rounds.append(
            {
                "theseus_tokens_per_sec": ours_tps,
                "pytorch_tokens_per_sec": theirs_tps,
                "ratio": ours_tps / theirs_tps,
                "jax_matmul_flops": jax_peak,
                "torch_matmul_flops": torch_peak,
                "mfu_vs_jax_peak": ours["flops_per_token"] * ours_tps / jax_peak,
                "mfu_vs_best_peak": ours["flops_per_token"] * ours_tps / max(jax_peak, torch_peak),
                "pytorch_mfu_vs_best_peak": ours["flops_per_token"]
                * theirs_tps
                / max(jax_peak, torch_peak),
            }
        )

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    summary = {key: median(key) for key in rounds[0]}
    result = {
        "benchmark": "train_cpu",
        "shape": SHAPE,
        "rounds": ROUNDS,
        "steps_per_round": STEPS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "median": summary,
        "theseus": {
            "compile_s": ours["compile_s"],
            "first_step_s": ours["first_step_s"],
            "flops_per_token": ours["flops_per_token"],
            "last_loss": ours["last_loss"](),
        },
        "pytorch_eager": {"threads": theirs["threads"], "last_loss": theirs["last_loss"]()},
        "per_round": rounds,
    }
    out = Path(__file__).parent / "results" / "train_cpu.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    s = summary
    print(f"theseus   {s['theseus_tokens_per_sec']:8.0f} tokens/s (median of {ROUNDS} rounds)")
    print(
        f"pytorch   {s['pytorch_tokens_per_sec']:8.0f} tokens/s (eager, {theirs['threads']} threads)"
    )
    print(f"ratio     {s['ratio']:.2f}x (median of per-round ratios)")
    print(
        f"MFU       {s['mfu_vs_jax_peak']:.1%} of the JAX f32 matmul peak "
        f"({s['jax_matmul_flops'] / 1e9:.0f} GFLOP/s), {s['mfu_vs_best_peak']:.1%} of the best "
        f"(PyTorch {s['torch_matmul_flops'] / 1e9:.0f} GFLOP/s); PyTorch's step "
        f"{s['pytorch_mfu_vs_best_peak']:.1%}"
    )
    print(f"compile   {ours['compile_s']:.1f}s  first step {ours['first_step_s']:.2f}s")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
