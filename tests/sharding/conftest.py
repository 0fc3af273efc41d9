"""Helpers of the sharding tests: scenarios run in subprocesses with simulated devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_module(
    module: str, *args: str, devices: int = 8, timeout: int = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m module args`` with ``devices`` simulated CPU devices."""
    environment = {**os.environ, **(env or {})}
    # XLA:CPU ends a process whose devices do not all reach a collective within 40 s; on two
    # shared cores (CI, beside the README tour) the split-parity run once waited longer
    # (a "Termination timeout for collective permute" abort), so wait as long as the test
    environment["XLA_FLAGS"] = (
        f"--xla_force_host_platform_device_count={devices}"
        f" --xla_cpu_collective_call_terminate_timeout_seconds={timeout}"
    )
    environment["JAX_PLATFORMS"] = "cpu"
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO), environment.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=environment,
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


# Scenarios of tests/sharding/split_parity.py, run once for test_context_parallel.py and
# test_expert_parallel.py (one process: JAX starts once, compiled steps are shared).
ATTENTION = [  # method:order:data,fsdp,context (2 context devices: the 2 x 2 with fsdp)
    "attn:ring:zigzag:1,1,4",
    "attn:ring:zigzag:1,2,2",
    "attn:all_gather:zigzag:1,1,4",
    "attn:all_gather:zigzag:1,2,2",
    "attn:ring:contiguous:2,1,4",
]
MUTANTS = ["mutant:boundary", "mutant:order"]
MOE = [  # data,fsdp,expert,tensor[:option]
    "moe:1,1,2,1",
    "moe:1,1,4,1:unbalanced",
    "moe:2,2,2,1",
    "moe:2,1,2,2:ragged_dot",
    "moe:2,1,2,1:capacity=1.0",
]
TRAIN = [  # model:data,fsdp,expert,context[:method]
    "train:llama:2,1,1,4:ring",
    "train:llama:2,2,1,2:all_gather",
    "train:qwen3_moe:1,2,2,2:ring",
]


@pytest.fixture(scope="session")
def split_results() -> dict[str, dict]:
    done = run_module("tests.sharding.split_parity", *ATTENTION, *MUTANTS, *MOE, *TRAIN)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["scenario"]: r for r in json_lines(done.stdout)}
