"""Plot a GRPO run's held-out accuracy (and its shuffled-reward control) from metrics.jsonl.

    uv run python bench/grpo_curve.py ROOT RUN CONTROL docs/grpo_accuracy.png

Reads ``ROOT/runs/<name>/metrics.jsonl`` of both runs; prints the curves and writes the PNG.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curve(root: Path, name: str, key: str) -> tuple[list[int], list[float]]:
    rows = [json.loads(line) for line in (root / "runs" / name / "metrics.jsonl").open()]
    points = {r["step"]: r[key] for r in rows if key in r}  # a resumed step's later record wins
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def main(root: str, run: str, control: str, out: str) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, label in ((run, "GRPO"), (control, "control: shuffled rewards")):
        steps, held = curve(Path(root), name, "eval/accuracy")
        print(label, "held-out accuracy", list(zip(steps, held, strict=True)))
        left.plot(steps, held, marker="o", label=label)
        steps, train = curve(Path(root), name, "eval/train_accuracy")
        print(label, "training-problem accuracy", list(zip(steps, train, strict=True)))
        right.plot(steps, train, marker="o", label=label)
    left.set(xlabel="step", ylabel="exact match", title="held-out problems (greedy)")
    right.set(xlabel="step", ylabel="exact match", title="training problems (greedy)")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:5])
