"""The tied output head's logits: float32 out, differentiated in the compute dtype."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from theseus.models.layers.embedding import float32_logits

N, D, V = 8, 32, 48


def inputs(dtype):
    kx, kt, kw = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (N, D)).astype(dtype)
    table = jax.random.normal(kt, (V, D)).astype(dtype)
    weights = jax.random.normal(kw, (N, V))  # a float32 loss over the logits
    return x, table, weights


def test_float32_gradients_are_autodiffs():
    """In float32 the custom backward is the plain einsum's: same sums, f32 rounding apart."""
    x, table, weights = inputs(jnp.float32)

    def loss(head):
        return jax.grad(lambda a, b: jnp.sum(head(a, b) * weights), argnums=(0, 1))(x, table)

    ours = loss(lambda a, b: float32_logits(a, b, "nd,vd->nv"))
    plain = loss(lambda a, b: jnp.einsum("nd,vd->nv", a, b))
    for got, want in zip(ours, plain, strict=True):
        # each entry is a sum of V (or N) products of O(1) terms: f32 rounding ~ 1e-6 relative
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bfloat16_logits_are_float32_and_backward_matmuls_bfloat16():
    x, table, weights = inputs(jnp.bfloat16)
    logits = float32_logits(x, table, "nd,vd->nv")
    assert logits.dtype == jnp.float32

    def loss(a, b):
        return jnp.sum(float32_logits(a, b, "nd,vd->nv") * weights)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    dx, dtable = grad(x, table)
    assert dx.dtype == dtable.dtype == jnp.bfloat16
    text = grad.lower(x, table).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert len(dots) == 2, dots  # the two backward matmuls (the forward one is not needed)
    operand_types = [re.search(r":\s*\((.*)\)\s*->", line).group(1) for line in dots]
    assert all("f32" not in types for types in operand_types), operand_types
    # and the values are the bfloat16-cotangent gradients, to bfloat16 rounding (2^-8 relative)
    g = weights.astype(jnp.bfloat16).astype(jnp.float32)
    want_dx = g @ table.astype(jnp.float32)
    want_dtable = g.T @ x.astype(jnp.float32)
    scale_dx = np.abs(g) @ np.abs(table.astype(jnp.float32))
    scale_dtable = np.abs(g.T) @ np.abs(x.astype(jnp.float32))
    assert np.all(np.abs(dx.astype(jnp.float32) - want_dx) <= 2**-7 * scale_dx + 1e-6)
    assert np.all(np.abs(dtable.astype(jnp.float32) - want_dtable) <= 2**-7 * scale_dtable + 1e-6)
