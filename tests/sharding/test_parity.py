"""Every shipped strategy against one device, on 8 simulated CPU devices (one subprocess).

Tolerances: the sharded step computes the same float32 sums in another order (partial sums
per device, then a cross-device reduction). Each reordering moves a sum by a few ulps of
its terms (eps = 1.2e-7), so loss, gradients and the parameters after 3 SGD steps agree to
~1e-6 relative; 1e-5 leaves room and still catches any real layout error (a missing or
doubled reduction is off by O(1), as the layout recorded in shared/facts.md was).
"""

from __future__ import annotations

import math

import pytest

from tests.sharding.conftest import json_lines, run_module

SCENARIOS = ["dp:8,1,1", "zero1:8,1,1", "fsdp:1,8,1", "tp:4,1,2", "tp:2,1,4", "fsdp+tp:2,2,2"]
REMAT = ["fsdp:1,8,1:block", "fsdp:1,8,1:full"]
DPO = ["dpo@zero1:8,1,1", "dpo@fsdp:1,8,1", "dpo@fsdp+tp:2,2,2"]
LORA = ["lora@fsdp:1,8,1", "lora@fsdp+tp:2,2,2"]
TOLERANCE = 1e-5

F, T, D = "fsdp", "tensor", "data"
# name suffix -> (parameter spec, optimizer-state spec), as docs/sharding.md documents them.
# The blocks' parameters (mlp.*, attention.*) are stacked over the layers: their first axis,
# ``layers``, is never split (the leading None), the rest as for one layer.
EXPECTED = {
    "dp:8,1,1": {},
    "zero1:8,1,1": {
        "mlp.up_proj.kernel": ([], [None, D]),
        "attention.q_proj.kernel": ([], [None, D]),
        "attention.o_proj.kernel": ([], [None, None, None, D]),
        "embed.embedding": ([], [None, D]),
        "final_norm.scale": ([], [D]),
        "mlp.up_proj.bias": ([], []),
    },
    "fsdp:1,8,1": {
        "mlp.up_proj.kernel": ([None, F], [None, F]),
        "attention.q_proj.kernel": ([None, F], [None, F]),
        "attention.o_proj.kernel": ([None, None, None, F], [None, None, None, F]),
        "embed.embedding": ([None, F], [None, F]),
        "final_norm.scale": ([F], [F]),
        "mlp.up_proj.bias": ([], []),
    },
    "tp:4,1,2": {
        "mlp.up_proj.kernel": ([None, None, T], [None, None, T]),
        "mlp.down_proj.kernel": ([None, T], [None, T]),
        "attention.q_proj.kernel": ([None, None, T], [None, None, T]),
        "attention.k_proj.kernel": ([None, None, T], [None, None, T]),
        "attention.o_proj.kernel": ([None, T], [None, T]),
        "embed.embedding": ([], []),
        "mlp.up_proj.bias": ([None, T], [None, T]),
    },
    "fsdp+tp:2,2,2": {
        "mlp.up_proj.kernel": ([None, F, T], [None, F, T]),
        "mlp.down_proj.kernel": ([None, T, F], [None, T, F]),
        "attention.q_proj.kernel": ([None, F, T], [None, F, T]),
        "attention.o_proj.kernel": ([None, T, None, F], [None, T, None, F]),
        "embed.embedding": ([None, F], [None, F]),
        "mlp.up_proj.bias": ([None, T], [None, T]),
    },
}
EXPECTED["tp:2,1,4"] = EXPECTED["tp:4,1,2"]


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    done = run_module("tests.sharding.parity", *SCENARIOS, *REMAT, *DPO, *LORA)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["scenario"]: r for r in json_lines(done.stdout)}


def lookup(specs: dict[str, list], suffix: str) -> list:
    matches = [spec for name, spec in specs.items() if name.endswith(suffix)]
    assert matches, (suffix, sorted(specs))
    return matches[0]


def expected_bytes(shapes: dict[str, list], specs: dict[str, list], mesh: dict[str, int]) -> int:
    total = 0
    for name, shape in shapes.items():
        ways = 1
        for part in specs[name]:
            for axis in part if isinstance(part, list) else [part]:
                ways *= mesh[axis] if axis else 1
        total += math.prod(shape) * 4 // ways
    return total


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_loss_gradients_and_params_match_one_device(results, scenario):
    r = results[scenario]
    assert r["loss"] < TOLERANCE, r["loss"]
    assert r["grads"] < TOLERANCE, r["grads"]
    assert r["params"] < TOLERANCE, r["params"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_partition_specs_and_per_device_bytes(results, scenario):
    r = results[scenario]
    expected = EXPECTED[scenario]
    if not expected:  # dp: everything replicated
        assert all(spec == [] for spec in r["param_specs"].values())
        assert all(spec == [] for spec in r["opt_specs"].values())
    for suffix, (param_spec, opt_spec) in expected.items():
        assert lookup(r["param_specs"], suffix) == param_spec, suffix
        assert (
            lookup({k: v for k, v in r["opt_specs"].items() if "trace" in k}, suffix) == opt_spec
        ), suffix
    assert r["param_bytes"] == expected_bytes(r["param_shapes"], r["param_specs"], r["mesh"])
    assert r["opt_bytes"] == expected_bytes(r["opt_shapes"], r["opt_specs"], r["mesh"])
    shrink = {"dp:8,1,1": (1, 1), "zero1:8,1,1": (1, 6), "fsdp:1,8,1": (6, 6)}
    low_params, low_opt = shrink.get(scenario, (1.5, 1.5))
    assert r["ref_param_bytes"] / r["param_bytes"] >= low_params
    assert r["ref_opt_bytes"] / r["opt_bytes"] >= low_opt


@pytest.mark.slow
@pytest.mark.parametrize("scenario", REMAT)
def test_activation_checkpointing_keeps_gradients(results, scenario):
    """Rematerialised blocks recompute the same forward: the same gradients (fsdp 8)."""
    r = results[scenario]
    assert max(r["loss"], r["grads"], r["params"]) < TOLERANCE, r


@pytest.mark.slow
@pytest.mark.parametrize("scenario", DPO + LORA)
def test_preference_and_adapter_training_match_one_device(results, scenario):
    """DPO's loss is a mean over pairs of log-sigmoids of sequence log-prob differences, and
    LoRA adds two small matmuls per projection: the same float32 sums reordered, so the same
    tolerance holds."""
    r = results[scenario]
    assert r["loss"] < TOLERANCE, r["loss"]
    assert r["grads"] < TOLERANCE, r["grads"]
    assert r["params"] < TOLERANCE, r["params"]
