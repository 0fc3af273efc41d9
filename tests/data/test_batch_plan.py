"""The batch plan: one place that splits a step's rows and refuses what does not split."""

from __future__ import annotations

import dataclasses

import pytest
from theseus.core.data import BatchPlan, BatchPlanError, DataError
from theseus.core.errors import ConfigError


def test_rows_split_over_processes_shards_and_micro_steps():
    plan = BatchPlan.of(48, per_device=3, batch_shards=4, processes=2)
    assert (plan.per_device, plan.micro_steps, plan.micro_rows) == (3, 4, 12)
    assert plan.process_rows == 24 and plan.items == 48
    assert plan.micro_steps * plan.batch_shards * plan.per_device == plan.global_rows


def test_without_a_per_device_size_the_batch_is_one_micro_step():
    plan = BatchPlan.of(32, batch_shards=8)
    assert (plan.per_device, plan.micro_steps) == (4, 1)


def test_pairs_are_counted_as_items_and_stay_whole_in_every_micro_step():
    plan = BatchPlan.of(16, per_device=2, batch_shards=2, pairs=True)
    assert plan.items == 8 and plan.micro_rows == 4
    with pytest.raises(BatchPlanError, match="gives 3 rows each, which splits a pair"):
        BatchPlan.of(6, per_device=3, pairs=True)  # two micro-steps of 3 rows


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"global_rows": 10, "per_device": 4}, "global_batch_size=10 is not a multiple of"),
        ({"global_rows": 8, "processes": 3}, "not divisible by the 3 processes"),
        ({"global_rows": 7, "pairs": True}, "is odd: the pairs layout"),
        ({"global_rows": 6, "processes": 2, "pairs": True}, "processes 3 rows"),
        ({"global_rows": 0}, "global_batch_size=0: must be at least 1"),
    ],
)
def test_a_batch_that_does_not_split_is_one_error_of_both_kinds(args, message):
    with pytest.raises(BatchPlanError, match=message) as caught:
        BatchPlan.of(**args)
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, DataError)
    assert "\n" not in str(caught.value)


def test_a_plan_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BatchPlan.of(8).global_rows = 4  # type: ignore[misc]


def test_the_run_plan_reads_the_mesh_axes_that_split_the_batch():
    from theseus.core.sharding.config import ShardingConfig
    from theseus.core.sharding.rules import batch_ways

    # 8 devices: fsdp takes them all; with tensor=2 half; context splits sequences, not rows
    assert batch_ways(ShardingConfig(strategy="fsdp"), 8) == 8
    assert batch_ways(ShardingConfig(strategy="fsdp+tp", tensor=2), 8) == 4
    assert batch_ways(ShardingConfig(strategy="dp", context=2), 8) == 4
