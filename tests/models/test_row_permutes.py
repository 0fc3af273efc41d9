"""The mixture's row moves without their zeros (``layers/row_permutes.py``): where rows are
sorted by expert and the caller never reads an assignment that got no row, skipping the
zero-fill changes nothing it reads, in the outputs or in any gradient.

The rows nobody owns then hold other tokens' values, scaled up here so that any leak into a
kept output or a weight gradient would show; the same operations run on the same rows
inside the groups, so the kept results are compared for equality, not within a tolerance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from theseus.models.layers.expert_rows import routed_rows
from theseus.models.layers.row_permutes import dispatch_rows

N, D, F, E = 48, 16, 12, 4


def weights() -> tuple[jax.Array, jax.Array, jax.Array]:
    keys = jax.random.split(jax.random.key(0), 3)
    shapes = ((E, D, F), (E, D, F), (E, F, D))
    return tuple(jax.random.normal(k, s) / s[1] ** 0.5 for k, s in zip(keys, shapes, strict=True))


def received() -> tuple[jax.Array, jax.Array, jax.Array]:
    """Rows as an expert-parallel receiver holds them: some arrived (kept), the rest not,
    their values large (the garbage a skipped fill would expose)."""
    x = jax.random.normal(jax.random.key(1), (N, D))
    expert = jax.random.randint(jax.random.key(2), (N,), 0, E)
    kept = jax.random.uniform(jax.random.key(3), (N,)) < 0.7
    return jnp.where(kept[:, None], x, 1e3 * x), expert, kept


@pytest.mark.parametrize(
    ("grouping", "weight_gradient"),
    [
        ("ragged_dot", "xla"),
        ("grouped", "xla"),
        ("grouped", "interpret"),
        ("pallas", "interpret"),
        ("tiles", "xla"),
    ],
)
def test_unread_unkept_rows_change_nothing_read(grouping, weight_gradient):
    x, expert, kept = received()
    cot = jax.random.normal(jax.random.key(4), (N, D)) * kept[:, None]  # unkept: never read

    def loss(w, x, unkept_read):
        y, _ = routed_rows(
            x, expert, kept, w, capacity=None, grouping=grouping,
            weight_gradient=weight_gradient, unkept_read=unkept_read,
        )  # fmt: skip
        return jnp.sum(jnp.where(kept[:, None], y, 0.0) * cot), y

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True), static_argnums=2)
    (value, y), (dw, dx) = grad(weights(), x, True)
    (value_, y_), (dw_, dx_) = grad(weights(), x, False)
    assert bool(jnp.all(jnp.where(kept[:, None], y == y_, True)))
    assert float(value) == float(value_) and float(jnp.max(jnp.abs(y))) > 0.1
    for a, b in zip(dw, dw_, strict=True):
        assert bool(jnp.array_equal(a, b)) and float(jnp.max(jnp.abs(a))) > 0
    assert bool(jnp.all(jnp.where(kept[:, None], dx == dx_, True)))


def test_without_zeros_the_rows_nobody_owns_hold_a_token():
    """The case above is exercised: dropping the fill does put values in unowned rows."""
    x = jnp.arange(1.0, N + 1.0)[:, None] * jnp.ones((N, D))
    row = jnp.where(jnp.arange(N) % 3 == 0, N, jnp.arange(N))  # a third own no row
    owner = jnp.full((N,), N).at[row].set(jnp.arange(N), mode="drop")
    with_zeros, without = (dispatch_rows(x, row, owner, zeros) for zeros in (True, False))
    unowned = owner == N
    assert bool(jnp.all(with_zeros[unowned] == 0)) and bool(jnp.all(without[unowned] > 0))
    assert bool(jnp.array_equal(with_zeros[~unowned], without[~unowned]))
