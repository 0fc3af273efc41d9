"""``sharding.expert=0`` (the default): a mixture's experts go over the ``expert`` axis, as many
ways as its expert count and the devices allow; a dense model keeps that axis at 1."""

from __future__ import annotations

import pytest
from theseus.core.sharding.config import ShardingConfig, mesh_shape
from theseus.core.sharding.rules import rules_for


def sharding(n_experts: int, **fields: object) -> ShardingConfig:
    config = ShardingConfig(**fields)  # type: ignore[arg-type]
    config.model_experts = n_experts  # what TrainJobConfig copies from model.n_experts
    return config


@pytest.mark.parametrize(
    "n_experts, fields, devices, expected",
    [
        (128, {"strategy": "fsdp"}, 32, {"fsdp": 1, "expert": 32}),  # Qwen3-30B-A3B, v5p-64
        (4, {"strategy": "fsdp"}, 32, {"fsdp": 8, "expert": 4}),  # fsdp keeps the rest
        (6, {"strategy": "fsdp"}, 8, {"fsdp": 4, "expert": 2}),  # the largest divisor of both
        (8, {"strategy": "dp"}, 8, {"data": 1, "expert": 8}),
        (8, {"strategy": "fsdp+tp", "tensor": 2}, 8, {"fsdp": 1, "expert": 4, "tensor": 2}),
        (8, {"strategy": "fsdp", "fsdp": 8}, 8, {"fsdp": 8, "expert": 1}),  # no devices left
        (8, {"strategy": "fsdp", "expert": 2}, 8, {"fsdp": 4, "expert": 2}),  # given: kept
        (0, {"strategy": "fsdp"}, 8, {"fsdp": 8, "expert": 1}),  # a dense model
    ],
)
def test_auto_experts_take_the_largest_divisor_the_devices_allow(
    n_experts, fields, devices, expected
):
    sizes = mesh_shape(sharding(n_experts, **fields), devices)
    assert {axis: sizes[axis] for axis in expected} == expected


def test_a_train_config_hands_the_mesh_its_model_expert_count():
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig

    regs = registries()
    for family, experts in (("qwen3_moe", 4), ("llama", 0)):
        tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, ["model.preset=tiny"])
        config = tree.to_object(TrainJobConfig)
        assert config.sharding.model_experts == experts
        assert mesh_shape(config.sharding, 8)["expert"] == (experts or 1)


def test_fsdp_splits_dense_parameters_over_the_expert_axis_and_experts_once():
    from theseus.core.sharding.placement import spec_for

    sizes = {"data": 1, "fsdp": 2, "expert": 4, "context": 1, "tensor": 1}
    rules = rules_for("fsdp").params
    dense = spec_for("wq", (64, 4, 16), ("embed", "heads", "head_dim"), rules, sizes)
    assert tuple(dense) == (("fsdp", "expert"), None, None)
    expert = spec_for("w_gate", (4, 64, 32), ("experts", "embed", "mlp"), rules, sizes)
    assert tuple(expert) == ("expert", "fsdp", None)
