"""The execution plan chooses a mixture's grouped expert matmuls for its chips
(``model.moe_grouping=auto``), states the choice, and the model's expert layers run it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from flax import nnx
from theseus.core.chips.moe_grouping import ExpertShape
from theseus.core.execution import ExecutionPlan
from theseus.core.sharding.config import ShardingConfig
from theseus.core.train.execution_choice import MeshFacts, plan_execution
from theseus.models.layers.moe import MoE
from theseus.models.qwen3_moe.config import PRESETS, Qwen3MoeConfig
from theseus.models.qwen3_moe.model import Qwen3Moe

AXES = {"data": 1, "fsdp": 4, "expert": 1, "context": 1, "tensor": 1}


def config(**fields) -> Qwen3MoeConfig:
    return Qwen3MoeConfig(vocab_size=64, **{**PRESETS["tiny"], **fields})


def plan(grouping: str, platform: str, kind: str, capacity: float = 0.0) -> ExecutionPlan:
    c = config(moe_grouping=grouping)
    model = nnx.eval_shape(lambda: Qwen3Moe(c, rngs=nnx.Rngs(0)))
    mesh = MeshFacts(AXES, platform, kind)
    sharding = ShardingConfig(strategy="fsdp")
    return plan_execution(
        model, sharding, mesh, 32, "qwen3_moe", None, capacity, grouping, ExpertShape.of(c)
    )


@pytest.mark.parametrize(
    "grouping, platform, kind, chosen, line",
    [
        ("auto", "tpu", "TPU v5 lite", "grouped",
         "expert matmuls: grouped (auto: the fastest measured on TPU v5 lite at d_model "
         "1024, 8 experts of 1024, top-2"),
        ("auto", "tpu", "TPU v5", "grouped", "taken for TPU v5"),
        ("auto", "cpu", "cpu", "tiles", "expert matmuls: tiles (auto on cpu: no grouping"),
        ("tiles", "tpu", "TPU v5 lite", "tiles", "expert matmuls: tiles (model.moe_grouping=tiles)"),
        ("ragged_dot", "cpu", "cpu", "ragged_dot", "ragged_dot (model.moe_grouping=ragged_dot)"),
    ],
)  # fmt: skip
def test_the_plan_chooses_and_states_the_grouping(grouping, platform, kind, chosen, line):
    execution = plan(grouping, platform, kind)
    assert execution.moe_grouping == chosen
    assert line in "\n".join(execution.lines())


def test_with_a_capacity_the_plan_says_no_grouping_applies():
    text = "\n".join(plan("auto", "tpu", "TPU v5 lite", capacity=1.25).lines())
    assert "expert matmuls: a batched matmul over each expert's capacity rows" in text


def test_a_dense_model_has_no_expert_matmuls_line():
    assert not [line for line in ExecutionPlan().lines() if line.startswith("expert matmuls")]


def test_the_expert_layers_run_the_plans_grouping_unless_one_is_asked_for():
    chosen = replace(ExecutionPlan(experts="global"), moe_grouping="ragged_dot")
    for asked, runs in (("auto", "ragged_dot"), ("tiles", "tiles")):
        c = config(moe_grouping=asked)
        model = nnx.eval_shape(lambda c=c: Qwen3Moe(c, rngs=nnx.Rngs(0), execution=chosen))
        layers = [m for _, m in nnx.iter_graph(model) if isinstance(m, MoE)]
        assert layers and {m.grouping for m in layers} == {runs}
    # built without a plan (an import, an evaluation): tiles, as before
    unplanned = nnx.eval_shape(lambda: Qwen3Moe(config(), rngs=nnx.Rngs(0)))
    assert {m.grouping for _, m in nnx.iter_graph(unplanned) if isinstance(m, MoE)} == {"tiles"}
