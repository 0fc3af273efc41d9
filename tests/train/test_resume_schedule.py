"""A resume that changes the run's length says what happens to the lr schedule (issue 35).

Before: resuming a finished 4-step cosine run with ``training.total_steps=6`` re-spread the
schedule over 6 steps without a word: the lr jumped from the schedule's final value back up
between steps 3 and 4.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from tests.faults.test_locks import snapshot
from tests.faults.test_resume_faults import clone
from tests.train.conftest import TINY, metrics, run_cli

PEAK, FINAL = 3e-3, 0.1
ARGS = [
    "run",
    "gpt/train/pretrain",
    *TINY,
    "eval.every=0",
    "checkpoint.every=2",
    "schedule.warmup_steps=0",
    f"optimizer.learning_rate={PEAK}",
    f"schedule.final_fraction={FINAL}",
]


def cosine(step: int, span: int) -> float:
    """optax's cosine decay from PEAK to PEAK * FINAL over ``span`` steps, then flat."""
    done = min(step, span) / span
    return PEAK * (FINAL + (1 - FINAL) * 0.5 * (1 + math.cos(math.pi * done)))


def lrs(root: Path, name: str) -> dict[int, float]:
    return {row["step"]: row["train/lr"] for row in metrics(root, name) if "train/lr" in row}


@pytest.fixture(scope="module")
def finished(shared_root) -> Path:
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", "sched-base")
    assert done.returncode == 0, done.stderr[-3000:]
    return shared_root / "runs" / "sched-base"


def test_a_longer_resume_is_refused_by_default_naming_both_lengths(shared_root, finished):
    run = clone(finished, "sched-refused")
    before = snapshot(run)
    done = run_cli(shared_root, *ARGS, "training.total_steps=6", "--name", run.name)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(
        f"error: run '{run.name}': training.total_steps changed on resume (4 -> 6 steps), "
        "which changes the lr of steps 4-5 under the cosine schedule over 4 steps"
    )
    assert f"{cosine(4, 4):.2e} if it continues, {cosine(4, 6):.2e} if stretched" in lines[0]
    assert "training.schedule_on_resume=continue" in lines[0] and "stretch" in lines[0]
    assert snapshot(run) == before


def test_continue_keeps_the_old_schedule_and_its_final_lr(shared_root, finished):
    run = clone(finished, "sched-continue")
    args = [*ARGS, "training.total_steps=6", "training.schedule_on_resume=continue"]
    done = run_cli(shared_root, *args, "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "training.schedule_on_resume=continue keeps the cosine lr schedule over 4 steps" in (
        done.stderr
    )
    got = lrs(shared_root, run.name)
    assert sorted(got) == list(range(6))
    for step in range(6):
        assert got[step] == pytest.approx(cosine(step, 4), rel=1e-5), step
    assert got[4] == got[5] == pytest.approx(PEAK * FINAL, rel=1e-5)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["schedule"]["total_steps"] == 4  # kept for later resumes
    history = json.loads((run / "job.json").read_text())["history"]
    assert history[-1]["changed"]["schedule.total_steps"] == [0, 4]
    # the same length again: nothing to decide, and the pinned schedule stays
    again = run_cli(shared_root, *args, "--name", run.name)
    assert again.returncode == 0 and "schedule_on_resume" not in again.stderr


def test_stretch_spans_the_new_length_and_says_the_lr_jumps(shared_root, finished):
    run = clone(finished, "sched-stretch")
    args = [*ARGS, "training.total_steps=6", "training.schedule_on_resume=stretch"]
    done = run_cli(shared_root, *args, "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "training.schedule_on_resume=stretch spans the cosine lr schedule over 6 steps; "
        f"the lr at step 4 goes from {cosine(4, 4):.2e} to {cosine(4, 6):.2e}"
    ) in done.stderr
    got = lrs(shared_root, run.name)
    assert got[4] == pytest.approx(cosine(4, 6), rel=1e-5) and got[4] > got[3]  # it jumps up
    assert yaml.safe_load((run / "config.yaml").read_text())["schedule"]["total_steps"] == 0


def test_a_schedule_the_length_does_not_change_needs_no_choice(shared_root):
    args = [a for a in ARGS if not a.startswith("schedule.final")] + ["schedule.name=constant"]
    first = run_cli(shared_root, *args, "training.total_steps=2", "--name", "sched-constant")
    assert first.returncode == 0, first.stderr[-3000:]
    done = run_cli(shared_root, *args, "training.total_steps=3", "--name", "sched-constant")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the constant lr schedule gives step 2 the same lr either way" in done.stderr
    assert lrs(shared_root, "sched-constant") == pytest.approx({0: PEAK, 1: PEAK, 2: PEAK})
