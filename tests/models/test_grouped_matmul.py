"""The grouped kernels (``layers/grouped_matmul.py``), in Pallas' interpreter: the weight
gradient computes each group's ``x.T @ dy`` over its own rows only, and the row product each
row's ``x @ w[its group]`` (zeros past the groups), for any group sizes (empty groups, a group
ending inside a row tile, rows past the last group, a row count no tile divides);
``grouped_matmul``'s gradients are ``ragged_dot``'s, with either kernel for the products.

Tolerances: the kernel sums float32 products of float32 inputs; a reordered sum of n terms
moves by at most ``(n - 1) u sum|terms|`` (u = 2^-24), with n the rows of the group. The
reference sums in float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from theseus.models.layers.grouped_matmul import (
    grouped_matmul,
    grouped_rows_product,
    grouped_weight_gradient,
    row_tile,
    visit_schedule,
)

U = 2.0**-24


def reference(x: np.ndarray, dy: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each group's ``x.T @ dy`` in float64, and the bound ``sum_rows |x| |dy|`` of each entry."""
    ends = np.cumsum(sizes)
    out = np.zeros((len(sizes), x.shape[1], dy.shape[1]))
    bound = np.zeros_like(out)
    for e, (start, end) in enumerate(zip(ends - sizes, ends, strict=True)):
        xs, ds = x[start:end].astype(np.float64), dy[start:end].astype(np.float64)
        out[e], bound[e] = xs.T @ ds, np.abs(xs).T @ np.abs(ds)
    return out, bound


CASES = {
    # rows, K, N, group sizes
    "empty-groups-and-a-tile-shared-by-three": (40, 128, 256, [0, 10, 0, 25, 5]),
    "rows-past-the-groups": (1000, 256, 128, [300, 0, 0, 600]),
    "no-rows-at-all": (64, 128, 128, [0, 0, 0, 0]),
    "one-group-many-tiles": (1300, 128, 128, [1300]),
    # fewer visits than the schedule has room for: the spare ones must add nothing
    "groups-on-tile-boundaries": (1024, 128, 128, [512, 0, 512]),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_each_group_gets_the_product_of_its_own_rows(case):
    M, K, N, sizes = case
    sizes = np.array(sizes, np.int32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(np.float32)
    dy = rng.standard_normal((M, N)).astype(np.float32)
    got = np.asarray(
        grouped_weight_gradient(jnp.asarray(x), jnp.asarray(dy), jnp.asarray(sizes), interpret=True)
    )
    want, bound = reference(x, dy, sizes)
    rows = max(int(sizes.max()), 1)
    assert np.all(np.abs(got - want) <= rows * U * bound + 1e-30)
    for e in np.flatnonzero(sizes == 0):  # an empty group's gradient is written, as zeros
        assert not np.any(got[e])
    if sizes.any():
        assert np.abs(want).max() > 1.0  # products of a useful size


def rows_reference(x: np.ndarray, w: np.ndarray, sizes: np.ndarray):
    """Each row times its group's matrix in float64 (zeros past the groups), and the bound
    ``|x| @ |w[group]|`` of each entry."""
    out = np.zeros((x.shape[0], w.shape[2]))
    bound = np.zeros_like(out)
    ends = np.cumsum(sizes)
    for e, (start, end) in enumerate(zip(ends - sizes, ends, strict=True)):
        xs, ws = x[start:end].astype(np.float64), w[e].astype(np.float64)
        out[start:end], bound[start:end] = xs @ ws, np.abs(xs) @ np.abs(ws)
    return out, bound


@pytest.mark.parametrize("transpose_w", [False, True], ids=["w", "w-transposed"])
@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_each_row_goes_through_its_own_groups_matrix(case, transpose_w):
    M, K, N, sizes = case
    sizes = np.array(sizes, np.int32)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((len(sizes), K, N)).astype(np.float32)
    stored = np.swapaxes(w, 1, 2) if transpose_w else w  # transposed: w[e].T is stored
    got = np.asarray(
        grouped_rows_product(
            jnp.asarray(x),
            jnp.asarray(stored),
            jnp.asarray(sizes),
            transpose_w=transpose_w,
            interpret=True,
        )  # fmt: skip
    )
    want, bound = rows_reference(x, w, sizes)
    assert np.all(np.abs(got - want) <= K * U * bound + 1e-30)
    assert not np.any(got[sizes.sum() :])  # past the groups: zeros, not what was there
    if sizes.any():
        assert np.abs(want).max() > 1.0


def test_a_row_product_over_several_blocks_of_both_sides():
    """K and N past one block (1024): the row tile's sums run over K's blocks, N's blocks
    are separate outputs."""
    M, K, N, sizes = 600, 2048, 1280, np.array([100, 450, 0, 30], np.int32)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((4, K, N)).astype(np.float32)
    got = np.asarray(
        grouped_rows_product(jnp.asarray(x), jnp.asarray(w), jnp.asarray(sizes), interpret=True)
    )
    want, bound = rows_reference(x, w, sizes)
    assert np.all(np.abs(got - want) <= K * U * bound + 1e-30) and not np.any(got[580:])


def test_the_schedule_visits_every_tile_of_every_group_once():
    """Group e is visited on each tile its rows touch (once when it has none), in group order,
    in at most tiles + E - 1 visits; later visits are marked dead."""
    sizes = jnp.array([0, 10, 0, 22, 0, 0])
    tile, tiles = 8, 5
    group, tile_of, live, starts, ends = (np.asarray(a) for a in visit_schedule(sizes, tiles, tile))
    assert len(group) == tiles + len(sizes) - 1
    visits = [(int(g), int(t)) for g, t, alive in zip(group, tile_of, live, strict=True) if alive]
    expected = []
    for e, (start, end) in enumerate(zip(starts, ends, strict=True)):
        touched = range(start // tile, (end - 1) // tile + 1) if end > start else [start // tile]
        expected += [(e, min(t, tiles - 1)) for t in touched]
    assert visits == expected
    assert list(group) == sorted(group)  # a group's visits are consecutive
    assert len(visits) < len(group)  # spare visits, dead


def test_every_tile_schedule_runs_the_last_group_to_the_last_tile():
    """For the row products: the tiles past the groups are visited too (as the last group's),
    within the same visit count."""
    sizes = jnp.array([0, 10, 0, 6, 0])
    tile, tiles = 8, 6
    group, tile_of, live, _, _ = (
        np.asarray(a) for a in visit_schedule(sizes, tiles, tile, every_tile=True)
    )
    alive = [(int(g), int(t)) for g, t, a in zip(group, tile_of, live, strict=True) if a]
    assert sorted({t for _, t in alive}) == list(range(tiles))
    assert [t for g, t in alive if g == 4] == [2, 3, 4, 5]
    assert len(group) == tiles + len(sizes) - 1


def test_row_tiles_are_whole_sublanes():
    assert row_tile(5) == 8 and row_tile(100) == 104 and row_tile(10**6) == 512


def test_its_gradients_are_ragged_dots():
    """Both gradients within the float32 bound of a float64 reference, as ragged_dot's own
    are: the input's (rows past the groups get none), the weights' (empty groups none)."""
    M, K, N = 96, 128, 128
    sizes = np.array([20, 0, 50, 10], np.int32)  # 16 rows past the groups
    rng = np.random.default_rng(1)
    x, cot = rng.standard_normal((M, K)), rng.standard_normal((M, N))
    w = rng.standard_normal((4, K, N))
    group = np.repeat(np.arange(5), [*sizes, M - sizes.sum()])  # 4: past the groups
    w_past = np.concatenate([w, np.zeros((1, K, N))])
    want_dx = np.einsum("mn,mkn->mk", cot, w_past[group])
    bound_dx = np.einsum("mn,mkn->mk", np.abs(cot), np.abs(w_past[group]))
    want_dw, bound_dw = reference(x, cot, sizes)

    def loss(matmul, x, w):
        return jnp.sum(matmul(x, w) * jnp.asarray(cot, jnp.float32))

    f32 = [jnp.asarray(a, jnp.float32) for a in (x, w)]
    results = [
        jax.grad(
            lambda x, w, rows=rows: loss(
                lambda a, b: grouped_matmul(a, b, jnp.asarray(sizes), "interpret", rows), x, w
            ),
            argnums=(0, 1),
        )(*f32)
        for rows in ("xla", "interpret")  # ragged_dot's products, then the kernel's
    ]
    theirs = jax.grad(
        lambda x, w: loss(lambda a, b: jax.lax.ragged_dot(a, b, jnp.asarray(sizes)), x, w),
        argnums=(0, 1),
    )(*f32)
    # the inputs were rounded to float32 too: u per factor, plus the sum's n u
    for got in (*results, theirs):
        dx, dw = (np.asarray(g, np.float64) for g in got)
        assert np.all(np.abs(dx - want_dx) <= (N + 3) * U * bound_dx)
        assert np.all(np.abs(dw - want_dw) <= (sizes.max() + 3) * U * bound_dw)
        assert not np.any(dx[sizes.sum() :]) and not np.any(dw[1])
