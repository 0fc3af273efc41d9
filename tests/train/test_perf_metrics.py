"""Honest throughput metrics: compile excluded from MFU, one cached peak, profiler traces."""

from __future__ import annotations

import json

from tests.train.conftest import TINY, metrics, run_cli

ARGS = ["run", "gpt/train/pretrain", *TINY, "eval.every=0", "checkpoint.every=0"]


def test_mfu_excludes_compile_and_profile_steps_write_a_trace(shared_root):
    done = run_cli(
        shared_root, *ARGS, "training.total_steps=6", "logging.profile_steps=2:4", "--name", "prof"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [m for m in metrics(shared_root, "prof") if "train/loss" in m]
    assert [r["step"] for r in rows] == list(range(6))
    first, rest = rows[0], rows[1:-1]  # the last row is recorded at the end: no sample
    # the first step carries the compile: its time is reported apart, not as throughput
    assert first["perf/first_step_time"] > 0 and "perf/mfu" not in first
    for row in rest:
        assert 0 < row["perf/mfu"] <= 1 and row["perf/tokens_per_sec"] > 0
    assert "perf/mfu" not in rows[-1]
    traces = list((shared_root / "runs/prof/profile").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0

    # the measured CPU peak is cached per machine under the root and reused by the next run
    cache = json.loads((shared_root / ".theseus/peak_flops.json").read_text())
    assert len(cache) == 1 and list(cache.values())[0] > 1e9
    again = run_cli(shared_root, *ARGS, "training.total_steps=2", "--name", "prof2")
    assert again.returncode == 0 and "cached in" in again.stderr


def test_a_malformed_profile_range_is_one_line_and_exit_2(shared_root):
    done = run_cli(shared_root, *ARGS, "logging.profile_steps=4:2", "--name", "badprof")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: logging.profile_steps='4:2': expected START:END with 0 <= START < END, e.g. 5:8"
    )
