"""``eval.tasks`` during training gives the same numbers on one device and on an FSDP mesh."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.train.conftest import TINY, metrics, theseus_cmd

pytestmark = pytest.mark.slow


def train(root, name, devices, *extra):
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices)}
    args = theseus_cmd(
        "run", "gpt/train/pretrain", *TINY, "training.total_steps=10", "eval.every=5",
        "eval.tasks=[val-ppl]", *extra, "--root", str(root), "--name", name,
    )  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return {m["step"]: m for m in metrics(root, name) if "eval/val-ppl/loss" in m}


def test_in_training_evaluations_agree_across_meshes(pretrained):
    single = train(pretrained, "mesh-1", 1)
    fsdp = train(pretrained, "mesh-fsdp", 2, "sharding.strategy=fsdp")
    assert sorted(single) == sorted(fsdp) == [5, 10]
    for step in (5, 10):
        for key in ("loss", "bits_per_byte"):
            name = f"eval/val-ppl/{key}"
            assert fsdp[step][name] == pytest.approx(single[step][name], rel=1e-5)
        assert fsdp[step]["eval/val-ppl/tokens"] == single[step]["eval/val-ppl/tokens"]
    assert (pretrained / "runs" / "mesh-fsdp" / "evaluations" / "step-10.json").exists()
