"""Join the GRPO device calls' results into ``bench/results/grpo_tpu.json``.

Reads ``bench/results/grpo_call*/``: ``decode_call*.json`` (``bench/decode_tpu.py``: the
compiled decoding loop against the HBM roofline, and the host loop it replaced),
``grpo_call*.json`` / ``theseus_*.json`` (``bench/grpo_tpu.py``: theseus's GRPO runs) and
``tunix_*.json`` (``bench/tunix_grpo.py``: Tunix 0.1.7's GRPOLearner), and writes one file
in the issue's schema: ``{"device", "commit", "cases": [{"shape", "new_tokens",
"theseus": {...}, "peer": {...}}], "decode": [...]}``. A side that no call measured is
``null`` with the reason in ``missing``.

    python bench/grpo_merge.py
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def load(pattern: str) -> list[tuple[str, dict]]:
    found = []
    for path in sorted(RESULTS.glob(f"grpo_call*/{pattern}")):
        found.append((path.parent.name, json.loads(path.read_text())))
    return found


MEASURED = Path(__file__).parents[1] / "packages/theseus-core/src/theseus/core/chips/measured.json"
#: the case the decoding loop's measured fraction of the roofline comes from (the plan's)
DECODE_CASE = ("qwen3_06b", 64, 1024, "pallas")


def decode_fraction(decode: list[dict]) -> float:
    """The roofline fraction of ``DECODE_CASE`` in the latest call that measured it."""
    shape, rows, new, reader = DECODE_CASE
    found = [
        case
        for case in decode
        if (case["shape"], case["rows"], case["new_tokens"], case["reader"]) == DECODE_CASE
    ]
    return round(sorted(found, key=lambda case: case["call"])[-1]["roofline_fraction"], 3)


def write_measured(device_kind: str, fraction: float) -> None:
    """``chips/measured.json``'s ``decode`` section: the figure dry runs estimate with."""
    data = json.loads(MEASURED.read_text())
    data.setdefault("decode", {})["roofline_fraction"] = {device_kind: fraction}
    MEASURED.write_text(json.dumps(data, indent=1) + "\n")


def main() -> None:
    decode = []
    for call, report in load("decode_call*.json"):
        for case in report.get("cases", []):
            if "error" not in case:
                decode.append({"call": call, **case})
    cases: dict[tuple[str, int, tuple[str, ...]], dict] = {}
    learn_lengths = None
    for call, report in [*load("grpo_call*.json"), *load("theseus_*.json")]:
        if "learn_lengths" in report:
            learn_lengths = {"call": call, **report["learn_lengths"]}
        for case in report.get("cases", []):
            overrides = tuple(case.get("overrides", []))
            key = (case["shape"], case["new_tokens"], overrides)
            cases.setdefault(key, {"shape": key[0], "new_tokens": key[1]})
            if overrides:
                cases[key]["overrides"] = list(overrides)
            cases[key]["theseus"] = {"call": call, **case["theseus"]}
    peers: dict[tuple[str, int], dict] = {}
    for call, result in load("tunix_*.json"):
        if "step_s" not in result:
            continue
        shape = "qwen3_06b" if "Qwen3" in result.get("architecture", "") else "llama_12x768"
        peers[(shape, result["new_tokens"])] = {  # the latest call's, calls in order
            "call": call,
            "name": f"tunix {result['version']}",
            "step_s": result["step_s"],
            "sample_s": result["sample_s"],
            "learn_s": result["learn_s"],
            "decode_tokens_per_s": result["decode_tokens_per_s"],
            "train_micro_steps": result.get("train_micro_steps_per_step"),
            "rollout_calls": result.get("rollout_calls_per_step"),
            "notes": result.get("notes", []),
        }
    for shape, new_tokens in peers:
        cases.setdefault((shape, new_tokens, ()), {"shape": shape, "new_tokens": new_tokens})
    for key, case in cases.items():
        case.setdefault("theseus", None)
        case["peer"] = peers.get(key[:2])
        if case["theseus"] and case["peer"]:
            case["speedup"] = {
                part: round(case["peer"][f"{part}_s"] / case["theseus"][f"{part}_s"], 3)
                for part in ("step", "sample", "learn")
            }
    out = {
        "device": "TPU v5 lite",
        "commit": "decode: 9099342 (kernel v2), 86f0720 (kernel v1); GRPO: theseus 8ae52fb "
        "(calls 5-7), Tunix's harness 6240d88",
        "vocabulary": "GRPO cases: the byte tokenizer (262 tokens) on both sides; decode: "
        "each model's own (Qwen3 151,936; GPT 50,304)",
        "cases": list(cases.values()),
        "learn_lengths": learn_lengths,
        "decode": decode,
    }
    (RESULTS / "grpo_tpu.json").write_text(json.dumps(out, indent=1) + "\n")
    write_measured(out["device"], decode_fraction(decode))
    print(json.dumps({k: v for k, v in out.items() if k != "decode"}, indent=1)[:2000])


if __name__ == "__main__":
    main()
