"""The compute dtype: one rule (``theseus.core.execution.compute_dtype``) decides it, the
execution plan carries it, and the model computes in the plan's dtype; params stay float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from theseus.core.execution import ExecutionPlan, compute_dtype


def test_one_rule_decides_the_compute_dtype_and_says_why():
    assert compute_dtype("auto", "tpu") == ("bfloat16", "model.dtype=auto on tpu")
    assert compute_dtype("auto", "gpu")[0] == compute_dtype("auto", "cuda")[0] == "bfloat16"
    assert compute_dtype("auto", "cpu") == ("float32", "model.dtype=auto on cpu")
    for name in ("float32", "bfloat16", "float16"):
        assert compute_dtype(name, "tpu") == (name, f"model.dtype={name}")
    assert compute_dtype("float32", "cpu", "bfloat16") == ("bfloat16", "precision.compute_dtype")


def test_the_model_computes_in_the_plans_dtype_not_its_configs():
    from tests.models.conftest import tiny

    plan = ExecutionPlan(compute_dtype="bfloat16", dtype_rule="a plan for a TPU")
    model = tiny("llama", execution=plan, dtype="float32")
    assert model.dtype == jnp.bfloat16
    assert {jnp.dtype(layer.dtype) for layer in model.attention_layers()} == {jnp.dtype("bfloat16")}
    hidden, _ = model.hidden_with_aux(jnp.ones((1, 8), jnp.int32))
    assert hidden.dtype == jnp.bfloat16


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_parameters_stay_float32_whatever_the_compute_dtype(dtype):
    from flax import nnx

    from tests.models.conftest import tiny

    model = tiny("llama", dtype=dtype)
    params = nnx.state(model, nnx.Param)
    assert {str(leaf.dtype) for leaf in jax.tree.leaves(params)} == {"float32"}
    # built without a plan: the rule on this process's backend
    assert model.dtype.name == compute_dtype(dtype, jax.default_backend())[0]
