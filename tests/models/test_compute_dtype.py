"""``model.dtype=auto``: bfloat16 compute on accelerators, float32 on CPU; params float32."""

from __future__ import annotations

import jax
import pytest
from theseus.models.config import compute_dtype


def test_auto_dtype_follows_the_backend_and_explicit_names_pass_through():
    expected = "bfloat16" if jax.default_backend() in ("gpu", "tpu") else "float32"
    assert compute_dtype("auto") == expected
    for name in ("float32", "bfloat16", "float16"):
        assert compute_dtype(name) == name


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_parameters_stay_float32_whatever_the_compute_dtype(dtype):
    from flax import nnx

    from tests.models.conftest import tiny

    model = tiny("llama", dtype=dtype)
    params = nnx.state(model, nnx.Param)
    assert {str(leaf.dtype) for leaf in jax.tree.leaves(params)} == {"float32"}
    assert model.dtype.name == compute_dtype(dtype)
