"""Collectives of theseus's step and MaxText's, side by side, grouped by kind, shape and group.

Reads the optimized HLO that ``bench/scale_vs_maxtext.py`` dumped for one row and lists, for
each side, every distinct collective (kind, result shapes, replica groups) with how often it
runs per step (scanned loops counted by their trip counts) and its bytes per chip, largest
first: where two programs for the same work differ, instruction by instruction.

Usage: python bench/collective_diff.py ROW [--top N]
(ROW is a folder under $SCALE_VS_MAXTEXT_WORK, default /tmp/scale_vs_maxtext, e.g.
``llama-3.1-8b-v5p-8``.)
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from pathlib import Path

from theseus.core.plan import hlo_stats

WORK = Path(os.environ.get("SCALE_VS_MAXTEXT_WORK", "/tmp/scale_vs_maxtext"))
GiB = 1024**3


def optimized_module(side: Path) -> str:
    """The largest ``*after_optimizations.txt`` of a side's dump: its training step."""
    found = sorted((side / "hlo").glob("*after_optimizations.txt"), key=lambda p: p.stat().st_size)
    if not found:
        raise SystemExit(f"no optimized HLO under {side / 'hlo'}: run bench/scale_vs_maxtext.py")
    return found[-1].read_text()


def collectives(text: str) -> dict[tuple[str, str, str], list[float]]:
    """(kind, result shapes, replica groups) -> [runs per step, bytes per chip per step]."""
    ran, shapes = hlo_stats.step_instructions(text)
    found: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for instruction, runs in ran:
        kind = hlo_stats.collective_kind(instruction.opcode)
        if not kind:
            continue
        result = [f"{dtype}{list(dims)}" for dtype, dims in instruction.result if dtype != "u32"]
        groups = instruction.attributes.partition("replica_groups=")[2][:40]
        entry = found[(kind, " ".join(result), groups)]
        entry[0] += runs
        entry[1] += runs * hlo_stats.collective_payload(instruction, shapes)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("row", help="a row's folder under the work directory")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for side in ("maxtext", "theseus"):
        found = collectives(optimized_module(WORK / args.row / side))
        total = sum(bytes_ for _, bytes_ in found.values())
        print(f"== {side}: {total / GiB:.2f} GiB per chip per step")
        ranked = sorted(found.items(), key=lambda item: -item[1][1])[: args.top]
        for (kind, result, groups), (runs, bytes_) in ranked:
            print(f"{bytes_ / GiB:9.3f} GiB x{runs:6.0f}  {kind:18s} {result[:70]:70s} {groups}")


if __name__ == "__main__":
    main()
