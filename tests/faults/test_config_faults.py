"""Nonsense that used to "succeed" or crash is refused in one line, exit 2, before any work.

Before: ``training.total_steps=-5`` exited 0 as "finished"; ``global_batch_size=-4`` said
"-4 is not a multiple of -4"; ``seq_len=0`` raised ZeroDivisionError; ``--branch RUN@abc``
and ``init.checkpoint=RUN@abc`` ended in ValueError tracebacks; a run named ``b@2`` could
never be branched from; ``skip_nonfinite`` skipped 28 of 30 steps and exited 0; rerunning a
finished run wrote ``"train/loss": NaN`` (invalid JSON) into summary.json.
"""

from __future__ import annotations

import json

import pytest

from tests.train.conftest import TINY, run_cli
from tests.train.test_training import nan_env, train  # noqa: F401  (a fixture)

BASE = ["run", "gpt/train/pretrain", *TINY]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.total_steps=-5", "training.total_steps=-5: must be at least 1"),
        ("training.global_batch_size=-4", "training.global_batch_size=-4: must be at least 1"),
        ("training.seq_len=0", "training.seq_len=0: must be at least 1"),
        ("checkpoint.every=-1", "checkpoint.every=-1: must be 0 or more"),
        # issue 24: these trained (gradient ascent), failed at step 1, or failed after training
        ("optimizer.learning_rate=-1", "optimizer.learning_rate=-1.0: must be greater than 0"),
        (
            "optimizer.learning_rate=nan",
            "optimizer.learning_rate=nan: must be a finite number greater than 0",
        ),
        ("data.validation_fraction=-0.5", "data.validation_fraction=-0.5: must be in [0, 1)"),
        (
            "init.checkpoint=trunk@abc",
            "init.checkpoint='trunk@abc': 'abc' is not a step number (use RUN@STEP)",
        ),
    ],
)
def test_bad_counts_and_references_are_one_line_before_any_work(tmp_path, override, message):
    args = [o for o in BASE if not o.startswith(override.split("=")[0] + "=")]
    done = run_cli(tmp_path, *args, override)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_run_names_with_at_and_branch_steps_that_are_not_numbers(tmp_path):
    named = run_cli(tmp_path, *BASE, "--name", "b@2")
    assert named.returncode == 2
    assert "'@' is reserved for RUN@STEP" in named.stderr.strip().splitlines()[-1]
    branched = run_cli(tmp_path, *BASE, "--name", "twig", "--branch", "trunk@abc")
    assert branched.returncode == 2
    assert branched.stderr.strip().splitlines() == [
        "error: --branch='trunk@abc': 'abc' is not a step number (use RUN@STEP)"
    ]


def test_a_run_that_keeps_skipping_steps_stops(shared_root, nan_env):  # noqa: F811
    args = train(8, "schedule.name=nan-at", "schedule.at=4", "training.skip_nonfinite=true")
    done = run_cli(shared_root, *args, "training.max_skipped_steps=2", "--name", "skips")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "skipped 3 steps with a non-finite loss" in done.stderr.strip().splitlines()[-1]
    assert json.loads((shared_root / "runs/skips/job.json").read_text())["status"] == "failed"


def test_summary_json_stays_valid_json_when_a_finished_run_is_rerun(shared_root):
    args = train(2)
    assert run_cli(shared_root, *args, "--name", "twice").returncode == 0
    first = json.loads((shared_root / "runs/twice/summary.json").read_text())
    again = run_cli(shared_root, *args, "--name", "twice")  # nothing left to train
    assert again.returncode == 0, again.stderr[-2000:]

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}")

    summary = json.loads(
        (shared_root / "runs/twice/summary.json").read_text(), parse_constant=refuse
    )
    assert summary == first  # the finished run's own summary, not a NaN loss
