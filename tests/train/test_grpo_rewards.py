"""The built-in rewards, the addition task's split and the rollout rows (pure Python/numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from theseus.core.errors import ConfigError
from theseus.core.plugins import registries
from theseus.core.recipes.grpo_run import rollout_rows
from theseus.core.recipes.grpo_task import addition_task, jsonl_task, row_seed, step_prompts
from theseus.core.recipes.rewards import (
    digit_match,
    digits_only,
    exact_answer,
    final_number,
    hash_answer,
)


def test_rewards_score_each_completion():
    completions = [" 12 ", "12.", "twelve", "1 2", "-3"]
    answers = ["12", "12", "12", "12", "-3"]
    assert exact_answer([""] * 5, completions, answer=answers) == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert digits_only([""] * 5, completions) == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_digit_match_gives_credit_per_digit_in_place():
    completions = ["57", " 47 ", "5", "157", "x7", "-57", "7"]
    scores = digit_match([""] * 7, completions, answer=["57"] * 7)
    # exact; tens wrong; one digit against the answer's tens' place (units 5 != 7) of 2;
    # an extra digit (2 of 3 places); not an integer; a sign (2 of 3); the units only (1 of 2)
    assert scores == [1.0, 0.5, 0.0, 2 / 3, 0.0, 2 / 3, 0.5]


def test_hash_answer_reads_the_number_after_the_marker():
    assert final_number("so 3 + 4 = 7\n#### 1,234") == "1234"
    assert final_number("it is 7.0") == "7"
    assert final_number("no number") is None
    completions = ["work: 5 then #### 42", "the answer is 42", "#### 41", "nothing"]
    rewards = hash_answer([""] * 4, completions, answer=["#### 42"] * 4)
    assert rewards == [1.0, 1.0, 0.0, 0.0]


def test_the_builtin_rewards_are_registered_plugins():
    rewards = registries().rewards
    assert {"addition_exact", "addition_digits", "addition_format", "hash_answer"} <= set(
        rewards.names()
    )
    assert rewards.get("addition_exact").load() is exact_answer


def test_held_out_problems_never_appear_in_training_and_prompts_are_keyed_by_step():
    train, held = addition_task(seed=3, max_digits=2, problems=500, held_out=64)
    assert len(held) == 64 and len(train) == 500
    assert not {p.question for p in train} & {p.question for p in held}
    assert all(int(p.answer) == sum(map(int, p.question[8:-1].split("+"))) for p in train)
    assert step_prompts(3, 5, 8, 500) == step_prompts(3, 5, 8, 500)
    assert step_prompts(3, 5, 8, 500) != step_prompts(3, 6, 8, 500)
    seeds = {row_seed(3, s, p, g) for s in range(3) for p in range(3) for g in range(3)}
    assert len(seeds) == 27  # every (step, problem, generation) gets its own stream


def test_rollout_rows_mask_the_completion_targets_only():
    batch = rollout_rows(
        [[1, 2, 3], [4]], [[7, 8], [9]], np.array([0.5, -0.5]), T=6, sampler_logps=[[-1, -2], [-3]]
    )
    assert batch["inputs"][0].tolist() == [1, 2, 3, 7, 0, 0]
    assert batch["targets"][0].tolist() == [2, 3, 7, 8, 0, 0]
    assert batch["loss_mask"][0].tolist() == [0, 0, 1, 1, 0, 0]  # predicts 7 and 8
    assert batch["inputs"][1].tolist()[:1] == [4] and batch["loss_mask"][1].tolist()[:2] == [1, 0]
    assert batch["segment_ids"][0].tolist() == [1, 1, 1, 1, 0, 0]
    assert batch["advantages"][1].tolist() == [-0.5] * 6
    assert batch["sampler_logps"][0].tolist() == [0, 0, -1, -2, 0, 0]
    assert batch["sampler_logps"][1].tolist() == [-3, 0, 0, 0, 0, 0]


def test_a_jsonl_task_holds_out_its_last_lines_and_names_a_bad_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"q": "a", "x": "1"}\n\n{"q": "b", "x": "2"}\n{"q": "c", "x": "3"}\n')
    train, held = jsonl_task(str(path), "q", "x", held_out=1)
    assert [p.question for p in train] == ["a", "b"] and held[0].answer == "3"
    with pytest.raises(ConfigError, match="more than grpo.eval_prompts=3"):
        jsonl_task(str(path), "q", "x", held_out=3)
    with pytest.raises(ConfigError, match=r"p.jsonl:1: expected a JSON object with 'q' and 'y'"):
        jsonl_task(str(path), "q", "y", held_out=1)
    with pytest.raises(ConfigError, match="no such file"):
        jsonl_task(str(tmp_path / "missing.jsonl"), "q", "x", held_out=1)
