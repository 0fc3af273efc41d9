"""The accelerator-shaped step, measured on CPU by properties that do not need a GPU.

1. Activation memory of the compiled step (GPT 2 layers x 128, batch 4): T=4096 over T=1024.
   Quadratic attention gives ~16x for 4x the tokens; memory-linear attention ~4x.
2. Compile time of the step for 24 layers over 2 layers (same width): a Python loop of
   layers grows the program with depth, a scan keeps it flat.
3. ``flops_per_step_program / flops_per_step_model`` for the gpt and qwen3_moe tiny presets:
   the matmuls of the traced step (loops times their trip counts) against the model's own
   count (routed MoE: only the k active experts). Near 1 means MFU is honest. XLA's
   ``flops_per_step_compiled`` is recorded too; it counts a scanned layer once.

Every figure comes from the same code path as ``theseus run ... --dry-run --json``
(``TrainSetup`` + ``train.plan_report.report``). Writes bench/results/accel_cpu.json.
Usage: python bench/accel_bench.py
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "accel_cpu.json"


def plan(model: str, overrides: list[str], vocab: int = 384) -> dict[str, Any]:
    """The dry-run report of ``<model>/train/pretrain`` with these overrides."""
    from theseus.core.plan.plan_report import report
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    tree = config_for(job_spec(f"{model}/train/pretrain", regs), regs, overrides)
    setup = TrainSetup.build(tree.to_object(TrainJobConfig), regs, vocab)
    return report(setup)


def gpt(layers: int, seq_len: int, batch: int = 4) -> list[str]:
    return [
        f"model.n_layers={layers}",
        "model.d_model=128",
        "model.n_heads=4",
        f"model.max_seq_len={seq_len}",
        f"training.seq_len={seq_len}",
        f"training.global_batch_size={batch}",
    ]


def main() -> None:
    import jax

    results: dict[str, Any] = {"machine": platform.node(), "jax": jax.__version__}

    short, long = plan("gpt", gpt(2, 1024)), plan("gpt", gpt(2, 4096))
    results["activation_bytes"] = {"T=1024": short["temp_bytes"], "T=4096": long["temp_bytes"]}
    results["activation_ratio_4096_over_1024"] = long["temp_bytes"] / short["temp_bytes"]
    results["attention"] = {"T=1024": short["attention"], "T=4096": long["attention"]}

    shallow, deep = plan("gpt", gpt(2, 256)), plan("gpt", gpt(24, 256))
    results["compile_seconds"] = {"2 layers": shallow["compile_seconds"]}
    results["compile_seconds"]["24 layers"] = deep["compile_seconds"]
    results["compile_ratio_24_over_2"] = deep["compile_seconds"] / shallow["compile_seconds"]

    tiny = ["model.preset=tiny", "model.max_seq_len=128", "training.seq_len=128"]
    results["flops_ratio_program_over_model"] = {}
    results["flops_ratio_compiled_over_model"] = {}  # XLA: a scanned layer counted once
    for model in ("gpt", "qwen3_moe"):
        r = plan(model, [*tiny, "training.global_batch_size=8"])
        results["flops_ratio_program_over_model"][model] = (
            r["flops_per_step_program"] / r["flops_per_step_model"]
        )
        results["flops_ratio_compiled_over_model"][model] = (
            r["flops_per_step_compiled"] / r["flops_per_step_model"]
        )
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
