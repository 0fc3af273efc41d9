"""Join one session's TPU runs into bench/results/tpu_v5e.json (the issue's schema).

    python bench/tpu_merge.py THESEUS.json MAXTEXT.json [BEFORE.json]

``THESEUS.json`` from ``tpu_bench.py``, ``MAXTEXT.json`` from ``tpu_device.sh maxtext`` (the
same chip, one call after the other), ``BEFORE.json`` an earlier ``tpu_bench.py`` run shown
as ``theseus_before``; the variants a run timed (``BENCH_VARIANTS``) are kept under
``variants``. A MaxText run cut by its time limit is read from the step lines it
logged (``maxtext_<shape>_steps.log`` beside MAXTEXT.json: the median of its steps from 3 on).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent
# MaxText's rows and remat for each shape (tpu_device.sh)
MAXTEXT = {
    "llama350_t2048": (8, "full"),
    "gpt124m_t1024": (16, "minimal"),
    "qwen3_06b_t2048": (8, "full"),
    "llama350_t8192": (1, "full"),
    "llama350_t32768": (1, "full"),
    "mixtral_t2048": (8, "minimal"),  # its best remat (minimal 47,011 against full 42,143)
}
SEQ = {"llama350_t2048": 2048, "gpt124m_t1024": 1024, "qwen3_06b_t2048": 2048,
       "llama350_t8192": 8192, "llama350_t32768": 32768, "mixtral_t2048": 2048}  # fmt: skip


def maxtext_case(shape: str, found: dict, folder: Path) -> dict:
    rows, remat = MAXTEXT[shape]
    run = found.get(shape) or found.get(f"{shape}/{remat}", {})
    step_s, source = run.get("median_step_time_s"), "maxtext.json (median of steps 5..)"
    if not step_s:
        log = folder / f"maxtext_{shape.split('_')[-1]}_steps.log"
        if log.exists():
            steps = {
                int(m.group(1)): float(m.group(2))
                for m in re.finditer(r"completed step: (\d+), seconds: ([\d.]+)", log.read_text())
            }
            kept = [s for n, s in steps.items() if n >= 3]
            if kept:
                step_s = statistics.median(kept)
                source = f"its log, steps 3..{max(steps)} (the run was cut at its time limit)"
    if not step_s:
        return {"rows": rows, "remat": remat, "error": run.get("error", "no steps")}
    return {
        "tokens_per_s": rows * SEQ[shape] / step_s,
        "step_s": step_s,
        "remat": remat,
        "rows": rows,
        "source": source,
    }


def theseus_case(result: dict) -> dict:
    keep = ("tokens_per_s", "step_s", "mfu", "attention", "remat", "remat_reason", "rows",
            "loss_chunks", "compile_s", "peak_bytes", "profile")  # fmt: skip
    return {k: result[k] for k in keep if k in result}


def main() -> None:
    theseus = json.loads(Path(sys.argv[1]).read_text())
    maxtext_path = Path(sys.argv[2])
    maxtext = json.loads(maxtext_path.read_text())
    before = {}
    if len(sys.argv) > 3:
        earlier = json.loads(Path(sys.argv[3]).read_text())
        before = {c["shape"]: c["theseus"] for c in earlier["cases"]}
    cases = []
    for case in theseus["cases"]:
        shape = case["shape"]
        ours = theseus_case(case["theseus"])
        theirs = maxtext_case(shape, maxtext, maxtext_path.parent)
        row = {"shape": shape, "theseus": ours, "maxtext": theirs}
        row["predicted_step_s"] = case.get("predicted_step_s")
        if shape in before:
            row["theseus_before"] = theseus_case(before[shape])
        variants = {
            name: {"overrides": run.get("overrides", []), **theseus_case(run)}
            for name, run in case.items()
            if isinstance(run, dict) and "overrides" in run and name != "theseus"
        }
        if variants:  # BENCH_VARIANTS of the same call
            row["variants"] = variants
        if "tokens_per_s" in theirs and "tokens_per_s" in ours:
            row["ratio_tokens_per_s"] = ours["tokens_per_s"] / theirs["tokens_per_s"]
        if row["predicted_step_s"] and "step_s" in ours:
            row["predicted_over_measured"] = row["predicted_step_s"] / ours["step_s"]
        cases.append(row)
    out = {
        "device": theseus["device"],
        "jax": theseus["jax"],
        "commit": theseus.get("commit", ""),
        "matmul_bf16_flops": theseus.get("matmul_bf16_flops"),
        "cases": cases,
    }
    path = HERE / "results" / "tpu_v5e.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for row in cases:
        print(row["shape"], {k: round(v, 3) for k, v in row.items() if isinstance(v, float)})
    print("wrote", path)


if __name__ == "__main__":
    main()
