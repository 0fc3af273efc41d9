"""``--dry-run``: the mesh and per-device memory of a training config, nothing allocated;
refusals of meshes and shapes that do not fit, in one line."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.train.conftest import TINY as TINY_ALL
from tests.train.conftest import theseus_cmd

TINY = [o for o in TINY_ALL if not o.startswith("training.global_batch_size=")]
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def dry_run(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the dry run asks itself
    command = theseus_cmd(
        "run",
        "gpt/train/pretrain",
        *TINY,
        "training.global_batch_size=8",
        "model.vocab_size=384",
        *overrides,
        "--dry-run",
        "--root",
        str(tmp_path),
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def row(text: str, name: str) -> float:
    match = re.search(rf"^\s+{name}\s+([\d.]+) (KiB|MiB|GiB)", text, re.M)
    assert match, text
    return float(match.group(1)) * UNITS[match.group(2)]


@pytest.mark.slow
def test_dry_run_reports_the_mesh_and_per_device_memory(tmp_path):
    one = dry_run(tmp_path, "sharding.strategy=fsdp", "sharding.fsdp=1")
    eight = dry_run(tmp_path, "sharding.strategy=fsdp", "sharding.fsdp=8")
    for done in (one, eight):
        assert done.returncode == 0, done.stderr[-3000:]
    assert "data=1 x fsdp=8 x tensor=1 (8 x cpu), strategy fsdp" in eight.stdout
    assert "activations + temps" in eight.stdout and "total" in eight.stdout
    # d_model=64 divides 8: every embed-named tensor shrinks 8x; biases of width mlp stay
    for name in ("parameters", "optimizer state"):
        assert 6 < row(one.stdout, name) / row(eight.stdout, name) <= 8
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_dry_run_refuses_a_shape_the_mesh_does_not_divide(tmp_path):
    done = dry_run(tmp_path, "sharding.strategy=tp", "sharding.data=1", "sharding.tensor=4")
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    # the blocks' parameters are stacked over the 2 layers: (layers, kv_heads, head_dim)
    assert line.startswith(
        "error: parameter blocks.attention.k_proj.bias of shape (2, 2, 32): its "
    )
    assert "'kv_heads' dimension (2) does not divide the mesh axis tensor=4" in line


def test_dry_run_refuses_a_mesh_that_is_not_the_device_count(tmp_path):
    done = dry_run(tmp_path, "sharding.data=-1", "sharding.tensor=3")
    assert done.returncode == 2
    assert "needs a multiple of 3 devices, but there are 1" in done.stderr


DRY_RUN_KEYS = (
    "activation_bytes",
    "argument_bytes",
    "compile_seconds",
    "flops_per_step_compiled",
    "flops_per_step_model",
    "flops_per_step_program",
    "attention",
    "devices",
)


@pytest.mark.parametrize("model", ["gpt", "qwen3_moe"])
def test_dry_run_json_counts_the_flops_the_compiler_sees(tmp_path, model):
    """One JSON object; the model's FLOPs agree with XLA's count of the compiled step."""
    import json

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    tiny = [o for o in TINY if o.startswith(("training.", "data.", "eval.", "logging."))]
    command = theseus_cmd(
        "run",
        f"{model}/train/pretrain",
        *tiny,
        "model.preset=tiny",
        "model.max_seq_len=64",
        "training.global_batch_size=8",
        "model.vocab_size=384",
        "--dry-run",
        "--json",
        "--root",
        str(tmp_path),
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    for key in DRY_RUN_KEYS:
        assert key in report, key
    assert report["devices"] == 1 and report["activation_bytes"] > 0
    # The model's count (what MFU divides by) against the matmuls the step really runs:
    # forward, backward, scanned layers times their count, routed experts with their tile
    # padding (<= 1/8) and the reference attention's 64-query blocks (which see a bit more
    # than the causal half the model counts) -- hence a band, not equality.
    assert report["program_dynamic_loops"] == 0
    ratio = report["flops_per_step_program"] / report["flops_per_step_model"]
    assert 0.8 <= ratio <= 1.3, (model, ratio, report)
    assert report["flops_per_step_compiled"] > 0  # XLA's own count (a scan body counted once)
