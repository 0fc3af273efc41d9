"""A scale plan: real model sizes compiled for real chips from this CPU machine, nothing run.

For each model and target, the step of ``<family>/train/pretrain`` is compiled by XLA:TPU or
XLA:GPU on the target's compile-only devices (``theseus run ... --dry-run --target``'s own
code path) with fsdp over every chip and scanned layers, and the largest per-chip batch
that fits is searched from a start value: halved while it does not fit, doubled while it
fits in under 45% of the chip's memory (at most ``TRIES`` compiles per cell).
Recorded per cell: the strategy and per-chip batch that fit, memory per chip, collective
bytes per step, the estimated step time and the predicted MFU -- estimates, not
measurements (see ``theseus.core.plan.step_estimate``).

MFU here is ``6 N + attention`` model FLOPs (``flops_per_token``: causal attention counted
over the keys each query sees, ~T/2, as MaxText does since its PR 1988) over the estimated
step time and the chips' dense bf16 peak.

Writes bench/results/scale.json after every cell (a long run keeps what finished) and the
table in docs/scale.md. One compile at a time: a 1B step takes minutes on 2 cores, 70B more.
Usage: python bench/scale.py [--only SUBSTRING] [--tries N] [--table-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "scale.json"
DOC = ROOT / "docs" / "scale.md"
TRIES = 3
GROW_BELOW = 0.45  # a step that fits in under this share of HBM is tried at twice the batch
GiB = 1024**3

# (label, family, preset, vocab, seq_len, targets, start per-chip batch, remat)
CASES = [
    ("GPT-2 124M", "gpt", "124m", 50257, 1024, ("v5p-8", "v5p-64", "h100x8"), 16, "none"),
    ("GPT-2 350M", "gpt", "350m", 50257, 1024, ("v5p-8", "v5p-64", "h100x8"), 8, "none"),
    ("Llama 3.2 1B", "llama", "1b", 128256, 8192, ("v5p-8", "v5p-64", "h100x8"), 4, "full"),
    ("Llama 3.1 8B", "llama", "8b", 128256, 8192, ("v5p-8", "v5p-64", "h100x8"), 2, "full"),
    ("Qwen3-30B-A3B", "qwen3_moe", "30b-a3b", 151936, 4096, ("v5p-8", "v5p-64", "h100x8"), 2, "full"),
    ("Llama 3.1 70B", "llama", "70b", 128256, 8192, ("v5p-64", "v5p-256", "h100x16", "h100x64"), 1, "full"),
]  # fmt: skip

# MaxText's published figures (docs/reference/models/tiering.md in AI-Hypercomputer/maxtext,
# read December 2026): measured, bf16, their own model FLOP count (causal attention halved).
MAXTEXT = [
    ("Llama 3.1 8B", "v6e-256", 8192, "45.46%", "7,207 tokens/s/chip"),
    ("Llama 3.1 70B", "v6e-256", 8192, "50.33%", "960 tokens/s/chip"),
    ("Llama 2 70B", "v5p-512", 4096, "65.4%", "692 tokens/s/chip"),
]


def overrides(
    family: str, preset: str, vocab: int, seq_len: int, per_chip: int, chips: int, remat: str
) -> list[str]:
    return [
        f"model.preset={preset}",
        f"model.vocab_size={vocab}",
        f"training.seq_len={seq_len}",
        f"training.global_batch_size={per_chip * chips}",
        f"training.per_device_batch_size={per_chip}",
        "sharding.strategy=fsdp",
        f"sharding.remat={remat}",
    ]


def plan_cell(family: str, values: list[str], target: str) -> dict[str, Any]:
    """The plan of ``theseus run <family>/train/pretrain VALUES --dry-run --target TARGET``
    (``dry_run.plan``'s setup, mesh first, and ``plan_report.report``), without the fit
    search: the caller searches the batch itself."""
    from theseus.core.plan.dry_run import target_devices
    from theseus.core.plan.plan_report import report
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.job_layout import job_layout
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, values)
    config = tree.to_object(TrainJobConfig)
    layout = job_layout(config, target_devices(target))  # the expert axis too, as a run's
    setup = TrainSetup.build(config, regs, config.model.vocab_size, layout=layout)
    return report(setup, "model.vocab_size", target)


def search(case: tuple, target: str, log, tries: int = TRIES) -> dict[str, Any]:
    label, family, preset, vocab, seq_len, _, start, remat = case
    from theseus.core.chips.targets import parse_target

    chips = parse_target(target).devices
    per_chip, tried = start, []

    def attempt(per_chip: int) -> dict[str, Any]:
        started = time.time()
        values = overrides(family, preset, vocab, seq_len, per_chip, chips, remat)
        try:
            result = plan_cell(family, values, target)
        except Exception as error:  # a compile that fails for another reason: recorded
            result = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            traceback.print_exc()
        result["wall_seconds"] = time.time() - started
        result["per_chip_batch"] = per_chip
        tried.append(result)
        log(
            f"{label} {target} per-chip batch {per_chip}: fits={result.get('fits')} "
            f"peak={result.get('peak_bytes', 0) / GiB:.1f} GiB "
            f"mfu={result.get('predicted_mfu')} in {result['wall_seconds']:.0f} s"
        )
        return result

    result = attempt(per_chip)
    while not result.get("fits") and per_chip > 1 and len(tried) < tries:
        per_chip //= 2  # too big: halve
        result = attempt(per_chip)
    while (
        result.get("fits")
        and result.get("peak_bytes", 0) < GROW_BELOW * result.get("hbm_bytes", 0)
        and len(tried) < tries
    ):
        per_chip *= 2  # lots of room: a bigger batch uses the chip better
        result = attempt(per_chip)
    fitting = [r for r in tried if r.get("fits")]
    best = max(fitting, key=lambda r: r["per_chip_batch"]) if fitting else tried[-1]
    return {
        "model": label,
        "target": target,
        "seq_len": seq_len,
        "remat": remat,
        **summary(best),
        "tried": [summary(r) for r in tried],
    }


def summary(r: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "fits", "per_chip_batch", "strategy", "mesh", "attention", "dtype", "peak_bytes",
        "argument_bytes", "temp_bytes", "hbm_bytes", "over_bytes", "collective_bytes",
        "collective_bytes_total", "flops_per_step_model", "flops_per_step_hlo",
        "step_seconds_estimate", "collective_seconds_estimate", "predicted_mfu",
        "estimate_method", "compile_seconds", "wall_seconds", "parameters", "error", "hosts",
        "hlo_dynamic_loops",
    )  # fmt: skip
    return {k: r[k] for k in keys if k in r}


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| model | target | seq | fits | per-chip batch | strategy, remat | attention | peak / HBM per chip | collectives per chip per step | est. step | predicted MFU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r and "peak_bytes" not in r:
            rows.append(
                f"| {r['model']} | {r['target']} | {r['seq_len']} | error | | | | | | | {r['error'][:80]} |"
            )
            continue
        peak = f"{r.get('peak_bytes', 0) / GiB:.1f} / {r.get('hbm_bytes', 0) / GiB:.0f} GiB"
        comms = ", ".join(
            f"{k} {v / GiB:.2f}" for k, v in (r.get("collective_bytes") or {}).items()
        )
        step = f"{r['step_seconds_estimate']:.3g} s" if "step_seconds_estimate" in r else "n/a"
        mfu = f"{100 * r['predicted_mfu']:.1f}%" if "predicted_mfu" in r else "n/a"
        fits = "yes" if r.get("fits") else f"no (+{r.get('over_bytes', 0) / GiB:.1f} GiB)"
        rows.append(
            f"| {r['model']} | {r['target']} | {r['seq_len']} | {fits} | {r.get('per_chip_batch')} | "
            f"{r.get('strategy')}, {r['remat']} | {r.get('attention', '')} | {peak} | "
            f"{comms + ' GiB' if comms else 'n/a'} | {step} | {mfu} |"
        )
    return "\n".join(rows)


def write_doc(results: list[dict[str, Any]]) -> None:
    text = DOC.read_text() if DOC.exists() else ""
    start, end = "<!-- scale table -->", "<!-- /scale table -->"
    block = f"{start}\n{table(results)}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text += "\n" + block + "\n"
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--only", default="", help="run the cells whose 'model target' contains this"
    )
    parser.add_argument(
        "--tries", type=int, default=TRIES, help="compiles per cell (1: the start batch only)"
    )
    parser.add_argument(
        "--table-only", action="store_true", help="rewrite docs/scale.md from the JSON"
    )
    args = parser.parse_args()
    existing = json.loads(OUT.read_text())["cells"] if OUT.exists() else []
    if args.table_only:
        write_doc(existing)
        return
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from theseus.core.chips.environment import quiet_libtpu

    quiet_libtpu()
    import jax

    def log(line: str) -> None:
        print(time.strftime("%H:%M:%S"), line, flush=True)

    cells = {(c["model"], c["target"]): c for c in existing}
    for case in CASES:
        for target in case[5]:
            if args.only and args.only not in f"{case[0]} {target}":
                continue
            cells[(case[0], target)] = search(case, target, log, args.tries)
            save(cells, jax.__version__)


def save(cells: dict[tuple[str, str], dict[str, Any]], jax_version: str) -> None:
    """bench/results/scale.json (cells in CASES' order) and the table in docs/scale.md."""
    ordered = [cells[(c[0], t)] for c in CASES for t in c[5] if (c[0], t) in cells]
    document = {"jax": jax_version, "maxtext": MAXTEXT, "cells": ordered}
    OUT.write_text(json.dumps(document, indent=2) + "\n")
    write_doc(ordered)


def record(model: str, target: str, seq_len: int, remat: str, per_chip: int, plan: dict) -> bool:
    """Keep another bench's plan of a cell (``plan_cell``'s, one compile at the cell's start
    batch, as ``--tries 1`` would make it) when it is this table's work; False otherwise."""
    case = next((c for c in CASES if c[0] == model and target in c[5]), None)
    if case is None or (case[4], case[7], case[6]) != (seq_len, remat, per_chip):
        return False
    import jax

    existing = json.loads(OUT.read_text())["cells"] if OUT.exists() else []
    cells = {(c["model"], c["target"]): c for c in existing}
    result = {**plan, "per_chip_batch": per_chip}
    cells[(model, target)] = {
        "model": model, "target": target, "seq_len": seq_len, "remat": remat,
        **summary(result), "tried": [summary(result)],
    }  # fmt: skip
    save(cells, jax.__version__)
    return True


if __name__ == "__main__":
    sys.exit(main())
