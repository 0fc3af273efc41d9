"""Reshard on restore: a checkpoint of a (data=2, fsdp=4) run restores on (1, 8), (8, 1) and
one device, and training continues with the losses the (2, 4) run itself went on to have.

The continuation differs from the original only in the order of float32 sums (another
mesh), so losses agree to ~1e-7 relative over a few AdamW steps; the bound is 1e-6.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import host_devices
from tests.train.conftest import TINY as TINY_ALL
from tests.train.conftest import theseus_cmd, train_losses

TINY = [o for o in TINY_ALL if not o.startswith("training.global_batch_size=")]
STEPS, AT = 6, 3


def cli(root: Path, devices: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLA_FLAGS": host_devices(devices)}
    command = theseus_cmd(*args, "--root", str(root))
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


def train(*extra: str) -> list[str]:
    return [
        "run",
        "gpt/train/pretrain",
        *TINY,
        "training.global_batch_size=8",
        f"training.total_steps={STEPS}",
        f"checkpoint.every={AT}",
        "eval.every=0",
        "sharding.strategy=fsdp",
        *extra,
    ]


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[Path, dict[int, float]]:
    root = tmp_path_factory.mktemp("reshard")
    done = cli(root, 8, *train("sharding.data=2", "sharding.fsdp=4"), "--name", "mesh24")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "data=2 x fsdp=4" in done.stderr
    return root, train_losses(root, "mesh24")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, devices, mesh",
    [("mesh18", 8, ("1", "8")), ("mesh81", 8, ("8", "1")), ("single", 1, ("1", "1"))],
)
def test_checkpoint_restores_on_another_mesh_and_training_continues(original, name, devices, mesh):
    root, losses = original
    data, fsdp = mesh
    done = cli(
        root,
        devices,
        *train(f"sharding.data={data}", f"sharding.fsdp={fsdp}"),
        "--name",
        name,
        "--branch",
        f"mesh24@{AT}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"data={data} x fsdp={fsdp}" in done.stderr
    continued = train_losses(root, name)
    assert len(continued) == STEPS - AT and set(continued) <= set(losses)
    for step, loss in continued.items():
        assert abs(loss - losses[step]) <= 1e-6 * abs(losses[step]), (step, loss, losses[step])
