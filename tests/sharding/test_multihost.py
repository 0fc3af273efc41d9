"""Two processes on loopback (jax.distributed, gloo), 2 simulated CPU devices each, against
one process with 4 devices: the same losses, and a checkpoint of the 2-process run restores
in the 1-process run.

Both runs compute the same sums over the same 4-way split batch and FSDP layout; only the
transport of the collectives differs (gloo across processes, in-process otherwise), so the
losses agree to float32 rounding of the reductions; the bound is 1e-6 relative.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import host_devices
from tests.sharding.conftest import REPO
from tests.train.conftest import TINY as TINY_ALL
from tests.train.conftest import metrics, theseus_cmd, train_losses

TINY = [o for o in TINY_ALL if not o.startswith("training.global_batch_size=")]
STEPS, AT = 4, 2
OVERRIDES = [
    *TINY,
    "training.global_batch_size=8",
    f"training.total_steps={STEPS}",
    f"checkpoint.every={AT}",
    "eval.every=0",
    "sharding.strategy=fsdp",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_with(devices: int, **extra: str) -> dict[str, str]:
    env = {**os.environ, **extra, "XLA_FLAGS": host_devices(devices)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * abs(b)


@pytest.mark.slow
def test_two_processes_match_one_and_their_checkpoint_restores_in_one(tmp_path):
    root = tmp_path / "root"
    single = subprocess.run(
        theseus_cmd(
            "run", "gpt/train/pretrain", *OVERRIDES, "--root", str(root), "--name", "single"
        ),
        capture_output=True,
        text=True,
        timeout=900,
        env=env_with(4),
    )
    assert single.returncode == 0, single.stderr[-3000:]
    assert "4 cpu devices (data=1 x fsdp=4" in single.stderr

    port = free_port()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.sharding.multihost", str(root), "multi", *OVERRIDES],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env_with(
                2,
                THESEUS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                THESEUS_NUM_PROCESSES="2",
                THESEUS_PROCESS_ID=str(index),
            ),
        )
        for index in range(2)
    ]
    outputs = [p.communicate(timeout=900) for p in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    reports = [
        json.loads(line) for out, _ in outputs for line in out.splitlines() if line.startswith("{")
    ]
    assert [(r["process"], r["devices"], r["local_devices"]) for r in reports] == [
        (0, 4, 2),
        (1, 4, 2),
    ]

    reference, multi = train_losses(root, "single"), train_losses(root, "multi")
    assert sorted(multi) == sorted(reference) and len(multi) == STEPS
    assert all(close(multi[s], reference[s]) for s in multi), (multi, reference)
    train_rows = [m for m in metrics(root, "multi") if "train/loss" in m]
    assert len(train_rows) == STEPS  # one process writes metrics
    assert sorted(
        p.name for p in (root / "runs/multi/checkpoints").iterdir() if p.name.isdigit()
    ) == ["2", "4"]

    branch = subprocess.run(
        theseus_cmd(
            "run",
            "gpt/train/pretrain",
            *OVERRIDES,
            "--root",
            str(root),
            "--name",
            "after",
            "--branch",
            f"multi@{AT}",
        ),
        capture_output=True,
        text=True,
        timeout=900,
        env=env_with(4),
    )
    assert branch.returncode == 0, branch.stderr[-3000:]
    after = train_losses(root, "after")
    assert len(after) == STEPS - AT and set(after) <= set(reference)
    assert all(close(after[s], reference[s]) for s in after), (after, reference)
