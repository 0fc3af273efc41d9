"""Helpers of the sharding tests: scenarios run in subprocesses with simulated devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import host_devices

REPO = Path(__file__).resolve().parents[2]


def run_module(
    module: str, *args: str, devices: int = 8, timeout: int = 780, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m module args`` with ``devices`` simulated CPU devices. A run past ``timeout``
    fails with what it had printed (the scenarios done) and its stderr's tail."""
    environment = {**os.environ, **(env or {})}
    # XLA:CPU ends a process whose devices do not all reach a collective within 40 s (it names
    # the collective on stderr); on two shared cores a slow device once took longer, so allow
    # a third of the run's time before calling it stuck
    environment["XLA_FLAGS"] = (
        f"{host_devices(devices)}"
        f" --xla_cpu_collective_call_terminate_timeout_seconds={max(40, timeout // 3)}"
    )
    environment["JAX_PLATFORMS"] = "cpu"
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO), environment.get("PYTHONPATH", "")])
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=environment,
        )
    except subprocess.TimeoutExpired as stuck:
        printed, errors = (_text(stuck.stdout), _text(stuck.stderr))
        pytest.fail(
            f"python -m {module} ran past {timeout} s; it printed:\n{printed[-2000:]}\n"
            f"stderr:\n{errors[-3000:]}"
        )


def _text(captured: str | bytes | None) -> str:
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


# Scenarios of tests/sharding/split_parity.py. Each test file runs its own in one process
# (JAX starts once, compiled steps are shared); two files, two xdist workers, no scenario
# run twice.
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
    "moe:2,2,1,1:grouped",
    "moe:2,1,2,1:capacity=1.0",
    "moe:1,1,4,1:unbalanced+ragged",
    "moe:2,2,2,1:ragged",
    "moe:2,2,2,1:ragged=4.0",
    "moe:1,1,4,1:unbalanced+ragged=1.0",
]
CONTEXT_TRAIN = [  # model:data,fsdp,expert,context[:method]
    "train:llama:2,1,1,4:ring",
    "train:llama:2,2,1,2:all_gather",
]
EXPERT_TRAIN = ["train:qwen3_moe:1,2,2,2:ring"]


def split_parity(*scenarios: str) -> dict[str, dict]:
    """Each scenario's result, by name, from one 8-device process, compiled there: XLA:CPU
    ran the expert-parallel training step read back from JAX's persistent cache with one of
    its 8 devices never reaching a collective-permute (a freshly compiled one passes; the
    second of two runs sharing a cache hung until the collective timeout, main b99393f).
    CI's cache starts empty, but two runs of one scenario list (the old shared fixture under
    two workers, or a second local run) were enough."""
    done = run_module(
        "tests.sharding.split_parity",
        *scenarios,
        timeout=600,
        env={"JAX_ENABLE_COMPILATION_CACHE": "false"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["scenario"]: r for r in json_lines(done.stdout)}
    assert set(results) == set(scenarios), sorted(set(scenarios) - set(results))
    return results
