"""The token embedding's custom backward: the gradient autodiff gives, summed in float32.

Off a mesh it is the same computation as autodiff of ``take`` then the cast (a float32
scatter-add of the cast cotangent), so the gradients are equal bit for bit; on a mesh only
the layout of the cotangent changes (tests/sharding/test_parity.py holds fsdp's step to one
device's, tests/chips/test_fsdp_collectives.py the all-to-all's dtype)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.layers.embedding import Embedding, lookup

V, D, B, T = 16, 8, 2, 12


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_gradient_equals_autodiff_bit_for_bit(dtype):
    table = jax.random.normal(jax.random.key(0), (V, D))
    ids = jax.random.randint(jax.random.key(1), (B, T), 0, 4)  # 4 rows: many repeats
    weights = jax.random.normal(jax.random.key(2), (B, T, D))

    def loss(embed):
        return lambda t: jnp.sum(embed(t).astype(jnp.float32) * weights)

    name = jnp.dtype(dtype).name
    ours = jax.grad(loss(lambda t: lookup(t, ids, name, ())))(table)
    plain = jax.grad(loss(lambda t: jnp.take(t, ids, axis=0).astype(dtype)))(table)
    assert ours.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(plain))
    assert np.all(np.asarray(ours)[4:] == 0) and np.any(np.asarray(ours)[:4] != 0)


def test_the_layer_returns_the_compute_dtype_and_the_table_rows():
    layer = Embedding(V, D, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    ids = jnp.array([[3, 0, 3]])
    out = layer(ids)
    assert out.dtype == jnp.bfloat16 and out.shape == (1, 3, D)
    want = np.asarray(layer.embedding[...])[[3, 0, 3]].astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(out)[0], want)
