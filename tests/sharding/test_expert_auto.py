"""``sharding.expert=0`` (the default): a mixture's experts go over the ``expert`` axis, as many
ways as its expert count and the devices allow, but for a dropless mixture on TPUs; a dense
model keeps that axis at 1."""

from __future__ import annotations

import pytest
from theseus.core.sharding.config import ShardingConfig, mesh_shape
from theseus.core.sharding.rules import rules_for


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
    sizes = mesh_shape(ShardingConfig(**fields), devices, n_experts)
    assert {axis: sizes[axis] for axis in expected} == expected


def test_a_jobs_layout_keeps_a_dropless_mixture_on_fsdp_on_tpus():
    """The mesh is decided from the whole config: ``job_layout`` hands the sharding group the
    model's ``n_experts``, but none for a dense model or for a dropless mixture on TPUs (its
    experts stay on fsdp, as MaxText's do: a dropless exchange's room grows with the axis);
    the sharding config itself carries no copy of it."""
    import jax
    from theseus.core.chips.devices import compile_only_devices
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.job_layout import job_layout

    regs = registries()
    cpu = jax.devices()[:1]
    cases = [
        ("qwen3_moe", [], None, 0),  # dropless on a TPU: no expert axis
        ("qwen3_moe", ["sharding.expert_capacity=1.25"], None, 4),
        ("qwen3_moe", ["model.capacity_factor=1.5"], None, 4),
        ("qwen3_moe", [], cpu, 4),  # elsewhere the axis stays
        ("llama", ["sharding.expert_capacity=1.25"], None, 0),  # dense
    ]
    for family, extra, devices, experts in cases:
        overrides = ["model.preset=tiny", *extra]
        tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, overrides)
        config = tree.to_object(TrainJobConfig)
        assert not hasattr(config.sharding, "model_experts")
        layout = job_layout(config, devices or compile_only_devices("v5p-8"))
        assert layout.experts == experts, (family, extra, devices)
        assert mesh_shape(config.sharding, 8, layout.experts)["expert"] == (experts or 1)


def test_fsdp_splits_dense_parameters_over_the_expert_axis_and_experts_once():
    from theseus.core.sharding.placement import spec_for

    sizes = {"data": 1, "fsdp": 2, "expert": 4, "context": 1, "tensor": 1}
    rules = rules_for("fsdp").params
    dense = spec_for("wq", (64, 4, 16), ("embed", "heads", "head_dim"), rules, sizes)
    assert tuple(dense) == (("fsdp", "expert"), None, None)
    expert = spec_for("w_gate", (4, 64, 32), ("experts", "embed", "mlp"), rules, sizes)
    assert tuple(expert) == ("expert", "fsdp", None)


SLABS, RAGGED = "all_to_all of fixed slabs", "ragged_all_to_all of exactly the assignments"


@pytest.mark.parametrize(
    "model_capacity, sharding, sizes, platform, dispatch, line",
    [
        # split experts, a dropless model, the defaults: dropless, on TPU by the ragged
        # exchange, elsewhere by slabs
        (0.0, {}, {"fsdp": 2, "expert": 4}, "tpu", "ragged",
         f"expert=4, {RAGGED} (auto on tpu, the model being dropless), dropless "
         "(sharding.expert_capacity=0, the model being dropless)"),
        (0.0, {}, {"fsdp": 2, "expert": 4}, "cpu", "slabs",
         f"expert=4, {SLABS} (auto on cpu: ragged is measured on TPU), dropless "
         "(sharding.expert_capacity=0"),
        # a capacity asked for: ragged on TPU, its room by sharding.expert_capacity
        (0.0, {"expert_capacity": 1.25}, {"fsdp": 2, "expert": 4}, "tpu", "ragged",
         f"expert=4, {RAGGED} (auto on tpu, the model being dropless), each expert taking "
         "at most 1.25x its balanced share of what arrives (sharding.expert_capacity=1.25"),
        # off TPU the same plan sends slabs sized by the capacity
        (0.0, {"expert_capacity": 1.25}, {"fsdp": 2, "expert": 4}, "cpu", "slabs",
         f"expert=4, {SLABS} (auto on cpu: ragged is measured on TPU), capacity factor 1.25"),
        # the model's own capacity wins, and only the slabs apply it
        (2.0, {}, {"expert": 4}, "tpu", "slabs", "capacity factor 2 per expert (model."),
        # dropless slabs, chosen
        (0.0, {"expert_capacity": 0.0, "expert_dispatch": "slabs"}, {"expert": 4}, "tpu",
         "slabs", f"{SLABS} (sharding.expert_dispatch=slabs), dropless"),
        # ragged asked for on CPU: the same exchange from an all-gather, said so
        (0.0, {"expert_dispatch": "ragged"}, {"expert": 4}, "cpu", "ragged_gathered",
         "from an all-gather (no ragged-all-to-all here) (sharding.expert_dispatch=ragged on cpu)"),
        # experts not split: no dispatch, no capacity (the dropless layer stays dropless)
        (0.0, {}, {"fsdp": 8}, "tpu", "slabs", "experts: per_device, dropless (model."),
        (0.0, {"expert_capacity": 1.25}, {}, "cpu", "slabs", "experts: global, dropless ("),
        # ... and a model with its own capacity drops, said so
        (1.5, {}, {"fsdp": 8}, "tpu", "slabs",
         "experts: per_device, capacity factor 1.5 per expert (model.capacity_factor=1.5; "
         "what overflows is dropped"),
    ],
)  # fmt: skip
def test_the_plan_states_the_expert_axis_and_the_dispatch(
    model_capacity, sharding, sizes, platform, dispatch, line
):
    execution = plan_for(
        model_capacity, ShardingConfig(strategy="fsdp", **sharding), sizes, platform
    )
    text = "\n".join(execution.lines())
    assert line in text, text
    assert execution.expert_dispatch == dispatch
    split = sizes.get("expert", 1) > 1
    expected = (model_capacity or sharding.get("expert_capacity", 0.0)) if split else 0.0
    assert execution.expert_capacity == expected
    assert execution.model_capacity == model_capacity
    assert ("dropped" in text) == (expected > 0 or model_capacity > 0)


def test_a_ragged_dispatch_refuses_a_model_that_caps_each_expert():
    from theseus.core.sharding.config import ShardingError

    sharding = ShardingConfig(strategy="fsdp", expert_dispatch="ragged")
    with pytest.raises(ShardingError, match=r"expert_dispatch=ragged: model.capacity_factor=2"):
        plan_for(2.0, sharding, {"expert": 4}, "tpu")


def plan_for(model_capacity: float, sharding: ShardingConfig, sizes: dict, platform: str):
    from flax import nnx
    from theseus.core.train.execution_choice import MeshFacts, plan_execution
    from theseus.models.qwen3_moe.config import PRESETS, Qwen3MoeConfig
    from theseus.models.qwen3_moe.model import Qwen3Moe

    config = Qwen3MoeConfig(vocab_size=64, **PRESETS["tiny"])
    model = nnx.eval_shape(lambda: Qwen3Moe(config, rngs=nnx.Rngs(0)))
    axes = {"data": 1, "fsdp": 1, "expert": 1, "context": 1, "tensor": 1, **sizes}
    return plan_execution(
        model, sharding, MeshFacts(axes, platform), 32, "qwen3_moe", model_capacity=model_capacity
    )
