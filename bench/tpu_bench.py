"""The training step on one TPU chip, the shapes of the TPU issue, with the default settings.

For each shape: the setup a user gets from the model and shape alone (``model.attention`` and
``sharding.remat`` left at ``auto``), its compile time, the median of the timed steps,
tokens/s, MFU against the chip's 197 TFLOP/s, the device's peak memory, what ``auto``
chose, and the step time that ``--dry-run --target v5e-1`` predicted on a CPU machine
before the run (``bench/results/tpu_v5e_predicted.json``, from ``bench/tpu_predict.py``).
``BENCH_VARIANTS="name:key=value,key=value;..."`` times variants of every shape too (other
remat levels, kernels; ``shape/name:...`` of that shape only); ``BENCH_PROFILE=1`` traces 3 steps of each default (``all``: of
every variant too) and sums the chip's op time by kind (``tpu_profile.py``).

    python bench/tpu_bench.py OUT.json [SHAPE ...]        # on the TPU: bench/tpu_device.sh
    BENCH_STEPS=2 python bench/tpu_bench.py x.json tiny   # a CPU smoke run
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

LLAMA350 = [
    "model.n_layers=24",
    "model.d_model=1024",
    "model.n_heads=16",
    "model.n_kv_heads=16",
    "model.d_ff=2816",
    "model.vocab_size=32000",
]
MIXTRAL = [
    "model.n_layers=12",
    "model.d_model=1024",
    "model.n_heads=16",
    "model.n_kv_heads=8",
    "model.n_experts=8",
    "model.n_experts_per_token=2",
    "model.moe_d_ff=1024",
    "model.sliding_window=0",
    "model.vocab_size=32000",
]
# fine-grained experts as Qwen3-30B-A3B has them (128 of them, top-8), two layers of them on
# one chip: the moe_grouping table's row for many experts
MOE128 = [
    "model.n_layers=2",
    "model.d_model=1024",
    "model.n_heads=16",
    "model.n_kv_heads=8",
    "model.head_dim=64",
    "model.n_experts=128",
    "model.n_experts_per_token=8",
    "model.moe_d_ff=384",
    "model.vocab_size=32000",
]
# name -> (job family, overrides, seq_len, rows); MaxText's knobs for the same work in
# tpu_device.sh (its GPT-124M class is its Llama block with MLP 2048: the same FLOPs)
SHAPES: dict[str, tuple[str, list[str], int, int]] = {
    "llama350_t2048": ("llama", LLAMA350, 2048, 8),
    "gpt124m_t1024": ("gpt", ["model.preset=124m", "model.vocab_size=8192"], 1024, 32),
    "qwen3_06b_t2048": ("qwen3", ["model.preset=0.6b", "model.vocab_size=32000"], 2048, 8),
    "llama350_t8192": ("llama", LLAMA350, 8192, 1),
    "llama350_t32768": ("llama", LLAMA350, 32768, 1),
    # the mixture: Mixtral's block, 12 x 1024, 16 heads of 64 (8 kv), 8 experts of
    # 1024, top-2, dropless (MaxText e591f30's Mixtral block with megablox, same shape)
    "mixtral_t2048": ("mixtral", MIXTRAL, 2048, 8),
    "moe128_t2048": ("qwen3_moe", MOE128, 2048, 8),
    "tiny": ("llama", ["model.preset=tiny", "model.vocab_size=256"], 256, 2),  # CPU smoke
}
DEFAULT_SHAPES = [name for name in SHAPES if name not in ("tiny", "moe128_t2048")]
STEPS = int(os.environ.get("BENCH_STEPS", "8"))
WARMUP = 2
PEAK = 197e12  # TPU v5e bf16, the chip's table (theseus.core.chips.specs)


def config(shape: str, extra: list[str]):
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig

    family, overrides, seq_len, rows = SHAPES[shape]
    regs = registries()
    overrides = [
        *overrides,
        f"training.seq_len={seq_len}",
        f"training.global_batch_size={rows}",
        f"model.max_seq_len={seq_len}",
        "optimizer.name=adamw",
        "schedule.name=constant",
        *extra,
    ]
    tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, overrides)
    return tree.to_object(TrainJobConfig), regs


def measure(shape: str, extra: list[str]) -> dict:
    import jax
    from synthetic import synthetic_batch
    from theseus.core.train.setup import TrainSetup

    cfg, regs = config(shape, extra)
    started = time.perf_counter()
    setup = TrainSetup.build(cfg, regs, cfg.model.vocab_size)
    built = time.perf_counter() - started
    rows, seq_len = cfg.training.global_batch_size, cfg.training.seq_len
    result = {
        "overrides": extra,
        "attention": setup.attention,
        "remat": setup.remat.level,
        "remat_reason": setup.remat.reason,
        "loss_chunks": setup.loss_chunks,
        "rows": rows,
        "seq_len": seq_len,
        "flops_per_token": setup.flops_per_token,
        "setup_s": built,
    }
    started = time.perf_counter()
    compiled = setup.train_step.lower(setup.abstract_state, setup.abstract_batch()).compile()
    result["compile_s"] = time.perf_counter() - started
    state = setup.init_state()
    batch = setup.layout.place_batch(synthetic_batch(rows, seq_len, cfg.model.vocab_size))
    times = []
    for index in range(WARMUP + STEPS):
        start = time.perf_counter()
        state, metrics = compiled(state, batch)
        metrics["loss"].block_until_ready()
        if index >= WARMUP:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    tokens_per_s = rows * seq_len / step_s
    stats = jax.devices()[0].memory_stats() or {}
    result.update(
        step_s=step_s,
        step_times_s=[round(t, 5) for t in times],
        tokens_per_s=tokens_per_s,
        mfu=setup.flops_per_token * tokens_per_s / PEAK,
        loss=float(metrics["loss"]),
        peak_bytes=stats.get("peak_bytes_in_use"),
        bytes_limit=stats.get("bytes_limit"),
    )
    profile = os.environ.get("BENCH_PROFILE", "")
    if profile == "all" or profile and not extra:
        from tpu_profile import profile_steps

        result["profile"] = profile_steps(compiled, state, batch, step_s)
    del state, batch, compiled
    return result


def variants(shape: str) -> list[tuple[str, list[str]]]:
    """The default, then ``BENCH_VARIANTS``' items; one named ``SHAPE/NAME`` runs on that
    shape only."""
    found = [("default", [])]
    for item in filter(None, os.environ.get("BENCH_VARIANTS", "").split(";")):
        name, _, overrides = item.partition(":")
        only, _, name = name.rpartition("/")
        if only in ("", shape):
            found.append((name, [o for o in overrides.split(",") if o]))
    return found


def main() -> None:
    import jax

    out = Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "results" / "tpu_v5e_theseus.json")
    shapes = sys.argv[2:] or DEFAULT_SHAPES
    predicted_path = HERE / "results" / "tpu_v5e_predicted.json"
    predicted = json.loads(predicted_path.read_text()) if predicted_path.exists() else {}
    report: dict = {
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "commit": os.environ.get("BENCH_COMMIT", ""),
        "cases": [],
    }
    if jax.default_backend() == "tpu":
        from gpu_bench import measured_bf16_peak

        report["matmul_bf16_flops"] = measured_bf16_peak()
        print(f"bf16 matmul: {report['matmul_bf16_flops'] / 1e12:.1f} TFLOP/s", flush=True)
    for shape in shapes:
        case: dict = {"shape": shape, "predicted_step_s": predicted.get(shape, {}).get("step_s")}
        for name, extra in variants(shape):
            try:
                result = measure(shape, extra)
            except Exception as error:  # out of memory, a refused kernel: recorded, not fatal
                result = {"overrides": extra, "error": str(error).splitlines()[0][:300]}
            case["theseus" if name == "default" else name] = result
            print(shape, name, json.dumps(result), flush=True)
        report["cases"].append(case)
        out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
