"""Bitwise-deterministic resume: kill -9 mid-run, rerun, compare with an uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train.conftest import TINY, final_params, kill_after, run_cli, train_losses

STEPS = 8
SCENARIOS = {
    "plain": [],
    "accumulation": ["training.per_device_batch_size=2"],
    "mixture": ["data.mixture={python-stdlib: 0.7, addition: 0.3}"],
    # the checkpoint at step 3 is the stage boundary: the resume starts the second stage
    "schedule": [
        "data.mixture_schedule=[{until_step: 3, weights: {python-stdlib: 0.9, addition: 0.1}},"
        " {weights: {python-stdlib: 0.2, addition: 0.8}}]"
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_killed_and_resumed_run_equals_uninterrupted_run(shared_root, scenario):
    args = [
        "run",
        "gpt/train/pretrain",
        *TINY,
        *SCENARIOS[scenario],
        f"training.total_steps={STEPS}",
        "checkpoint.every=3",
        "checkpoint.asynchronous=false",
        "eval.every=0",
    ]
    whole = f"whole-{scenario}"
    result = run_cli(shared_root, *args, "--name", whole)
    assert result.returncode == 0, result.stderr[-3000:]

    split = f"split-{scenario}"
    code = kill_after(shared_root, split, args, steps=5)
    assert code == -9
    assert len(train_losses(shared_root, split)) < STEPS
    resumed = run_cli(shared_root, *args, "--name", split)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr

    expected, got = train_losses(shared_root, whole), train_losses(shared_root, split)
    assert sorted(expected) == list(range(STEPS))
    assert got == expected  # exact float equality, step by step
    a, b = final_params(shared_root, whole), final_params(shared_root, split)
    assert a.keys() == b.keys() and len(a) > 4
    for key in a:
        assert np.array_equal(a[key], b[key]), key
