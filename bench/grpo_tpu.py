"""GRPO steps on one chip, as a user runs them: ``<model>/train/grpo`` from the CLI.

Each case is a real GRPO run (its rollouts sampled by the compiled sampler, scored, learned
from) of 16 prompts x 8 completions of the addition task, with ``grpo.stop_at_end=false``
so every completion runs the full ``grpo.max_new_tokens`` (the worst case a benchmark
should time), started from a short SFT run of the same shape (GRPO refuses random weights).
The byte tokenizer (a vocabulary of 260), the task's chat prompts (about 30 tokens). The
per-step times are read from the run's own metrics (``time/sample``, ``time/score``,
``time/learn``); the first ``WARMUP`` steps (compilation) are left out and the median of the
others taken.

``learn_lengths`` is the learning step's own check: after a 20-step SFT of the 12 x 768 GPT
its completions end after a few tokens, and ``time/learn`` is compared between
``grpo.max_new_tokens=64`` and ``256`` (the rows are padded to the bucket of the longest
rollout, not to ``training.seq_len``).

    python bench/grpo_tpu.py OUT.json prepare gpt_12x768:512 qwen3_06b:1024 learn_lengths
    python bench/grpo_tpu.py x.json prepare tiny:16   # a CPU smoke run
    python bench/grpo_tpu.py x.json llama_12x768:512:training.per_device_batch_size=16
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("GRPO_ROOT", "/tmp/grpo-bench"))
STEPS = int(os.environ.get("GRPO_STEPS", "5"))
WARMUP = 2
SHAPES = {
    "gpt_12x768": ("gpt", ["model.preset=124m", "model.vocab_size=262"]),
    "qwen3_06b": ("qwen3", ["model.preset=0.6b", "model.vocab_size=262"]),
    "llama_12x768": (
        "llama",
        ["model.n_layers=12", "model.d_model=768", "model.n_heads=12", "model.n_kv_heads=12"],
    ),
    "tiny": ("llama", ["model.preset=tiny"]),
}
# What a shape's GRPO run needs on one v5e (a --dry-run --target v5e-1 says so): Qwen3-0.6B
# learns from 128 x 552 in micro-steps of 16 rows (at 128 rows at once the step needs 20.5
# GiB) and samples in passes of 64 rows, as Tunix does (its KV cache beside the state)
GRPO_EXTRA = {
    "qwen3_06b": ["training.per_device_batch_size=16", "grpo.sample_rows=64"],
}
PROMPT = 40  # room for the task's prompts (the longest addition prompt is about 30 tokens)


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "theseus.cli.main", "run", *args, "--root", str(ROOT)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    print(f"[{time.perf_counter() - started:6.1f} s] {' '.join(args[:2])} exit {done.returncode}")
    if done.returncode:
        print(done.stderr[-2500:])
    return done


def sft(shape: str, steps: int = 2, learning_rate: str = "1e-3") -> str:
    """An SFT run of the shape (the init of its GRPO runs), once."""
    family, overrides = SHAPES[shape]
    name = f"sft-{shape}"
    if (ROOT / "runs" / name / "checkpoints").is_dir():
        return name
    args = [f"{family}/train/sft", *overrides, "data.tokenizer=byte", "model.max_seq_len=2048"]
    args += ["training.seq_len=64", "training.global_batch_size=64"]
    args += [f"training.total_steps={steps}", f"optimizer.learning_rate={learning_rate}"]
    args += ["eval.every=0", "logging.progress=false", "--name", name]
    cli(*args)
    return name


def grpo(shape: str, new_tokens: int, name: str, *extra: str) -> list[dict]:
    family, _ = SHAPES[shape]
    args = [f"{family}/train/grpo", f"init.checkpoint=sft-{shape}", "data.tokenizer=byte"]
    args += ["model.max_seq_len=2048"]  # how it computes, not the weights: not inherited
    args += [f"grpo.max_new_tokens={new_tokens}", f"training.seq_len={PROMPT + new_tokens}"]
    args += ["grpo.generations=8", "training.global_batch_size=128", "schedule.name=constant"]
    args += ["optimizer.learning_rate=1e-6", f"training.total_steps={STEPS}", "eval.every=0"]
    args += ["grpo.eval_prompts=1", "logging.every=1", "logging.progress=false"]
    args += ["checkpoint.every=0", *GRPO_EXTRA.get(shape, []), *extra, "--name", name]
    done = cli(*args)
    path = ROOT / "runs" / name / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if done.returncode:
        raise RuntimeError(done.stderr[-1500:])
    return [r for r in rows if "time/sample" in r]


def median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows[WARMUP:] if key in r]
    return statistics.median(values) if values else None


def case(shape: str, new_tokens: int, *overrides: str) -> dict:
    sft(shape)
    name = f"grpo-{shape}-{new_tokens}" + "".join(f"-{o.split('=')[-1]}" for o in overrides)
    rows = grpo(shape, new_tokens, name, "grpo.stop_at_end=false", *overrides)
    sample, score, learn = (median(rows, f"time/{k}") for k in ("sample", "score", "learn"))
    step = None if None in (sample, score, learn) else sample + score + learn
    tokens = 128 * new_tokens
    return {
        "shape": shape,
        "new_tokens": new_tokens,
        "overrides": list(overrides),
        "theseus": {
            "step_s": step,
            "sample_s": sample,
            "score_s": score,
            "learn_s": learn,
            "decode_tokens_per_s": tokens / sample if sample else None,
            "learn_length": median(rows, "rollout/learn_length"),
            "steps_timed": len(rows) - WARMUP,
        },
    }


def learn_lengths() -> dict:
    """``time/learn`` with ~40-token rollouts at ``max_new_tokens`` 64 and 256."""
    sft("gpt_12x768", steps=20)
    found = {}
    for new_tokens in (64, 256):
        rows = grpo("gpt_12x768", new_tokens, f"grpo-short-{new_tokens}")
        found[new_tokens] = {
            "learn_s": median(rows, "time/learn"),
            "completion_length": median(rows, "rollout/completion_length"),
            "learn_length": median(rows, "rollout/learn_length"),
        }
    found["ratio"] = found[256]["learn_s"] / found[64]["learn_s"]
    return found


def main() -> None:
    out = Path(sys.argv[1])
    # this process never opens the chip: each run is a process of its own that must
    report: dict = {"device": os.environ.get("BENCH_DEVICE", ""), "cases": []}
    report["commit"] = os.environ.get("THESEUS_COMMIT", "")
    for part in sys.argv[2:]:
        try:
            if part == "prepare":
                continue
            if part.startswith("export:"):
                shape = part.split(":")[1]
                sft(shape)
                cli("hf/export", f"hf.run=sft-{shape}", f"hf.dir={ROOT / ('hf-' + shape)}")
            elif part == "learn_lengths":
                report["learn_lengths"] = learn_lengths()
            else:
                shape, new_tokens, *overrides = part.split(":")
                report["cases"].append(case(shape, int(new_tokens), *overrides))
        except Exception as error:  # a part that fails is reported, the others still run
            report.setdefault("errors", {})[part] = str(error)[-1500:]
        print(part, json.dumps(report.get("cases", [])[-1:] or report.get(part, "")), flush=True)
        out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
