"""Checkpoints with the context and expert axes: a killed run resumes bit for bit, and a
checkpoint moves from the split mesh to one device and back, training on.

One tiny qwen3_moe run (experts and attention, so both axes matter) on 4 simulated devices:
``expert=2 x context=2``. The moved runs differ from the original only in the order of
float32 sums, so their losses follow it within the first-order bound of
test_context_parallel.py (AdamW's update divides each moment by its own scale, so a relative
error of a gradient passes through to the update at first order, as with SGD).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import host_devices
from tests.sharding.test_context_parallel import loss_bounds
from tests.train.conftest import kill_after, theseus_cmd, train_losses

STEPS, EVERY = 8, 3
# the dropless dispatch: the moved runs differ from the original only in summation order
SPLIT = ["sharding.data=1", "sharding.expert=2", "sharding.context=2", "sharding.expert_capacity=0"]
PLAIN = ["sharding.data=1", "sharding.expert=1", "sharding.context=1"]  # a branch inherits
ARGS = [
    "run",
    "qwen3_moe/train/pretrain",
    "model.preset=tiny",
    "model.max_seq_len=64",
    "training.seq_len=32",
    "training.global_batch_size=4",
    "data.max_documents=24",
    "data.vocab_size=384",
    "data.num_workers=1",
    "eval.batches=2",
    "eval.every=0",
    "logging.every=1",
    "logging.progress=false",
    f"training.total_steps={STEPS}",
    f"checkpoint.every={EVERY}",
    "checkpoint.asynchronous=false",
]


def devices_env(count: int) -> dict[str, str]:
    return {**os.environ, "XLA_FLAGS": host_devices(count)}


def cli(root: Path, devices: int, *args: str) -> subprocess.CompletedProcess:
    command = theseus_cmd(*args, "--root", str(root))
    return subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=devices_env(devices)
    )


def saved_params(root: Path, name: str) -> dict[str, np.ndarray]:
    """The parameters of a run's newest checkpoint as host arrays, whatever devices wrote
    them (this process may have started JAX with another device count)."""
    import jax
    import orbax.checkpoint as ocp

    directory = root / "runs" / name / "checkpoints"
    step = max(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(directory / str(step) / "state").item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    restored = checkpointer.restore(directory / str(step) / "state", restore_args=as_numpy)
    flat = jax.tree_util.tree_flatten_with_path(restored["params"])[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[Path, dict[int, float]]:
    root = tmp_path_factory.mktemp("split-resume")
    done = cli(root, 4, *ARGS, *SPLIT, "--name", "whole")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "expert=2 x context=2" in done.stderr and "attention: ring/flash" in done.stderr
    return root, train_losses(root, "whole")


@pytest.mark.slow
def test_a_killed_split_run_resumes_bit_for_bit(whole, monkeypatch):
    root, expected = whole
    monkeypatch.setenv("XLA_FLAGS", host_devices(4))
    code = kill_after(root, "killed", [*ARGS, *SPLIT], steps=5)
    assert code == -9, f"the run ended with {code} before it was killed"
    assert len(train_losses(root, "killed")) < STEPS
    resumed = cli(root, 4, *ARGS, *SPLIT, "--name", "killed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr, resumed.stderr[-3000:]
    got = train_losses(root, "killed")
    assert got == expected, (got, expected, resumed.stderr[-2000:])  # exact, step by step
    a, b = saved_params(root, "whole"), saved_params(root, "killed")
    assert a.keys() == b.keys() and any("w_gate" in key for key in a)
    for key in a:
        assert np.array_equal(a[key], b[key]), key


@pytest.mark.slow
def test_a_split_checkpoint_moves_to_one_device_and_back(whole):
    root, expected = whole
    bounds = dict(enumerate(loss_bounds([expected[s] for s in range(STEPS)])))
    plain = cli(root, 1, *ARGS, *PLAIN, "--name", "plain", "--branch", f"whole@{EVERY}")
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "data=1 x fsdp=1 x tensor=1" in plain.stderr
    back = cli(root, 4, *ARGS, *SPLIT, "--name", "back", "--branch", f"plain@{2 * EVERY}")
    assert back.returncode == 0, back.stderr[-3000:]
    for name, first in (("plain", EVERY), ("back", 2 * EVERY)):
        losses = train_losses(root, name)
        assert sorted(losses) == list(range(first, STEPS)), (name, losses)
        for step, loss in losses.items():
            assert abs(loss - expected[step]) <= bounds[step], (name, step, loss, expected[step])
