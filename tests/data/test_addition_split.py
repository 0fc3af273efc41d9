"""The addition task's one split: training sets never hold a problem the evaluation asks."""

from __future__ import annotations

import pytest
from theseus.core import addition
from theseus.core.errors import ConfigError
from theseus.core.evaluate import generation
from theseus.core.evaluate.configs import AdditionEvalConfig
from theseus.data.datasets.chat import Addition, AdditionConfig
from theseus.data.datasets.preference import AdditionPreference, AdditionPreferenceConfig


def operands(question: str) -> tuple[int, int]:
    a, b = question.removeprefix("What is ").removesuffix("?").split("+")
    return int(a), int(b)


def test_training_sets_and_the_evaluation_are_on_opposite_sides_of_the_split():
    chats = [c[0]["content"] for c in Addition(AdditionConfig(num_examples=3000)).records()]
    pairs = [p["prompt"] for p in AdditionPreference(AdditionPreferenceConfig()).records()]
    asked = [q for q, _ in generation.addition_problems(AdditionEvalConfig(num_examples=300))]
    trained = {operands(q) for q in chats + pairs}
    held = {operands(q) for q in asked}
    assert not trained & held
    assert all(addition.held_out(a, b) for a, b in held)
    assert len(held) > 250  # two-digit problems: few repeats among 300 draws
    # about one two-digit problem in ten is held out (1006 of 10,000 with this checksum)
    share = sum(addition.held_out(a, b) for a in range(100) for b in range(100)) / 10_000
    assert 0.08 < share < 0.12


def test_the_training_split_of_the_evaluation_asks_what_the_training_set_holds():
    config = AdditionEvalConfig(max_digits=1, split="training", num_examples=2000)
    asked = {operands(q) for q, _ in generation.addition_problems(config)}
    table = {operands(c[0]["content"]) for c in Addition(AdditionConfig(max_digits=1)).records()}
    assert asked == table and len(table) == 90  # the 10 x 10 table less its 10 held out


def test_an_unknown_split_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="split='test': expected one of held-out, training"):
        AdditionEvalConfig(split="test")
