"""Defaults that scale with the run, and the plan's lines about them: ``eval.every=-1``
resolves to 20 evaluations a run (at least 25 steps apart), and a long run that keeps
values sized for a 100-step one gets one warning line naming them (no JAX: config only)."""

from __future__ import annotations

import pytest
from theseus.core.plan.recipe_summary import lines, summary
from theseus.core.plugins import registries
from theseus.core.runner import config_for, job_spec
from theseus.core.train.configs import TrainJobConfig


def typed(*overrides: str) -> TrainJobConfig:
    regs = registries()
    tree = config_for(job_spec("gpt/train/pretrain", regs), regs, list(overrides))
    return tree.to_object(TrainJobConfig)


@pytest.mark.parametrize(
    "overrides, every",
    [
        ([], 25),  # the default 100 steps: as before the cadence scaled
        (["training.total_steps=1000"], 50),
        (["training.total_steps=9000"], 450),
        (["training.total_steps=9000", "eval.every=7"], 7),  # given: kept
        (["training.total_steps=9000", "eval.every=0"], 0),  # only at the end
        # total_tokens sets the length: 64 x 128 tokens a step, 1,000 steps
        (["training.global_batch_size=64", f"training.total_tokens={64 * 128 * 1000}"], 50),
    ],
)
def test_the_evaluation_cadence_follows_the_run(overrides, every):
    config = typed(*overrides)
    assert config.eval.every == every
    assert summary(config)["eval_every"] == every


def test_a_long_run_with_short_run_values_is_warned_of_in_one_line():
    short = ["schedule.warmup_steps=10", "eval.every=25", "checkpoint.every=50"]
    found = summary(typed("training.total_steps=9000", *short))
    (warning,) = found["warnings"]
    assert warning == (
        "a 9000-step run with values sized for a short one: schedule.warmup_steps=10 (0.1% of "
        "the schedule; -1 takes 1%), eval.every=25 (360 evaluations; -1 takes 20), "
        "checkpoint.every=50 (180 checkpoints)"
    )
    assert [line for line in lines(found) if line.startswith("warning")] == [
        f"warning     {warning}"
    ]
    # the same run with the derived defaults and checkpoints every 500 steps: no warning
    assert summary(typed("training.total_steps=9000", "checkpoint.every=500"))["warnings"] == []
    # a short run with the defaults is not a long one
    assert summary(typed())["warnings"] == []


def test_the_plan_lines_say_what_the_run_does():
    found = summary(
        typed("training.total_steps=9000", "schedule.name=wsd", "logging.loggers=[tensorboard]")
    )
    text = "\n".join(lines(found))
    assert "steps       9000 of 2,048 tokens (18.4M tokens)" in text
    assert (
        "warm-up 90 steps (1.0%), then constant, then linear decay to 0 over steps 7200-9000"
        in text
    )
    assert "evaluation  every 450 steps (20 in the run, the last at the end) over 4 batches" in text
    assert "metrics     every 10 steps to the run folder (metrics.jsonl) and tensorboard" in text
