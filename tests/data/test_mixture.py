"""Mixture schedules: weights by stage, shares within sampling error, every row read once."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from datatest_helpers import data_config
from theseus.core.data import DataError
from theseus.core.data.api import open_training_data
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.data.config import MixtureStage
from theseus.core.data.mixture import Mixture, Stage, stage_ends
from theseus.core.errors import ConfigKeyError
from theseus.core.runner import prepare
from theseus.data import load_tokenizer

ITEMS, STAGE_STEPS = 32, 100
STAGES = [Stage(0, STAGE_STEPS, (0.8, 0.2)), Stage(STAGE_STEPS, None, (0.1, 0.9))]


def test_realized_shares_are_within_sampling_error_of_each_stage():
    mixture = Mixture(STAGES, ITEMS, seed=11)
    n = ITEMS * STAGE_STEPS  # items per stage
    for stage in STAGES:
        start = stage.start
        first, _ = mixture.counts(start)
        last, _ = mixture.counts(start + STAGE_STEPS)
        share = (last - first)[0] / n
        w = stage.weights[0]
        # Each item is dataset 0 with probability w, independently: the count is
        # Binomial(n, w), so its share has standard deviation sqrt(w (1 - w) / n). Five of
        # them bound it (a false alarm once in ~1.7 million runs; the seed is fixed anyway).
        assert abs(share - w) <= 5 * math.sqrt(w * (1 - w) / n), (stage, share)
    realized = mixture.realized(2 * STAGE_STEPS - 1)
    expected = (np.array(STAGES[0].weights) + np.array(STAGES[1].weights)) / 2
    assert np.abs(realized - expected).max() <= 5 * math.sqrt(0.25 / (2 * n))


def test_each_dataset_reads_its_rows_in_order_without_gaps_or_repeats():
    mixture = Mixture(STAGES, ITEMS, seed=11)
    seen: list[list[int]] = [[], []]
    for step in range(2 * STAGE_STEPS + 50):  # across the boundary and chunk edges
        source, rows = mixture.assign(step)
        assert len(source) == ITEMS
        for d in (0, 1):
            seen[d] += sorted(rows[source == d].tolist())
    for d in (0, 1):
        assert seen[d] == list(range(len(seen[d])))
    again = Mixture(STAGES, ITEMS, seed=11)  # no history: any step, any order
    for step in (170, 3, 99, 100):
        a, b = mixture.assign(step), again.assign(step)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def stages_of(*stages: dict) -> list[MixtureStage]:
    return [MixtureStage(**s) for s in stages]


def test_stage_ends_in_fractions_steps_and_tokens():
    schedule = stages_of(
        {"until": 0.25, "weights": {"a": 1}},
        {"until_step": 50, "weights": {"a": 1}},
        {"until_tokens": 64_001, "weights": {"a": 1}},
        {"weights": {"a": 1}},
    )
    assert stage_ends(schedule, total_steps=100, tokens_per_step=1000) == [25, 50, 65, None]


@pytest.mark.parametrize(
    "schedule, message",
    [
        ([{"until": 1.5, "weights": {"a": 1}}, {"weights": {"a": 1}}], r"\[0\].until is 1.5"),
        ([{"until_step": 9, "weights": {"a": 1}}, {"until_step": 4, "weights": {"a": 1}}]
         + [{"weights": {"a": 1}}], r"\[1\] ends at step 4, not after .* \(step 9\)"),
        ([{"weights": {"a": 1}}, {"weights": {"a": 1}}], r"\[0\] needs exactly one of until"),
        ([{"until": 0.5, "weights": {"a": 1}}, {"until": 1.0, "weights": {"a": 1}}],
         r"\[1\] is the last stage .* remove its until"),
    ],
)  # fmt: skip
def test_schedule_mistakes_are_one_line(schedule, message):
    with pytest.raises(DataError, match=message) as error:
        stage_ends(stages_of(*schedule), total_steps=100, tokens_per_step=1000)
    assert "\n" not in str(error.value)


def test_schedule_keys_are_checked_on_the_command_line(tmp_path):
    stages = "[{until: 0.5, weights: {python-stdlib: 1}}, {weights: {addition: 1}}]"
    config = prepare("gpt/train/pretrain", [f"data.mixture_schedule={stages}"], root=tmp_path)
    typed = config.typed_config().data.mixture_schedule
    assert typed[0].until == 0.5 and typed[1].weights == {"addition": 1.0}
    with pytest.raises(ConfigKeyError, match="MixtureStage has no key 'untill'; did you mean"):
        prepare("gpt/train/pretrain", ["data.mixture_schedule=[{untill: 1}]"], root=tmp_path)


def test_a_schedule_switches_datasets_at_its_stage_boundary(stdlib_root, mixture_root):
    schedule = stages_of(
        {"until": 0.5, "weights": {"python-stdlib": 1.0, "addition": 0.0}},
        {"weights": {"python-stdlib": 0.0, "addition": 1.0}},
    )
    data = dataclasses.replace(mixture_root, mixture={}, mixture_schedule=schedule)
    loader = open_training_data(stdlib_root, data, seq_len=32, batch=8, seed=3, total_steps=10)
    user = load_tokenizer(loader.tokenizer_dir).special_id("<|user|>")
    for step in range(10):  # chat windows hold a user turn; Python source never does
        chat = (loader.batch(step)["inputs"] == user).any(axis=1)
        assert chat.all() if step >= 5 else not chat.any(), step
    metrics = loader.step_metrics(9)
    assert metrics == {"data/mix/python-stdlib": 0.5, "data/mix/addition": 0.5}
    hosts = [
        open_training_data(stdlib_root, data, seq_len=32, batch=BatchPlan.of(8, processes=2),
                           seed=3, total_steps=10, process_index=i)
        for i in range(2)
    ]  # fmt: skip
    for step in (4, 5):  # either side of the boundary: two hosts read the same global batch
        whole, parts = loader.batch(step), [h.batch(step) for h in hosts]
        for key in whole:
            np.testing.assert_array_equal(whole[key], np.concatenate([p[key] for p in parts]))
    with pytest.raises(DataError, match="needs the number of training steps"):
        open_training_data(stdlib_root, data, seq_len=32, batch=8, seed=3)
    both = dataclasses.replace(data, mixture={"addition": 1.0})
    with pytest.raises(DataError, match="data.mixture and data.mixture_schedule are both set"):
        open_training_data(stdlib_root, both, seq_len=32, batch=8, seed=3)


def test_zero_weights_everywhere_are_refused(stdlib_root, mixture_root):
    schedule = stages_of({"weights": {"python-stdlib": 0.0, "addition": 0.0}})
    data = data_config(**{**dataclasses.asdict(mixture_root), "mixture": {}})
    data = dataclasses.replace(data, mixture_schedule=schedule)
    with pytest.raises(DataError, match=r"mixture_schedule\[0\] gives every dataset weight 0"):
        open_training_data(stdlib_root, data, seq_len=32, batch=8, seed=3)
