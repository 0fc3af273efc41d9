"""Where a mixture's assignments go in the expert buffer (``expert_rows.assign_rows``),
against a reference written as the layout's definition: a loop over the experts that deals
each its assignments in order, and a buffer row's owner read off that deal.

The layout is built from two sorts; a scatter (which TPUs run one index at a time) must not
come back, nor a gather where the rows are sorted by expert, so the lowered program is read
for them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from theseus.models.layers.expert_rows import assign_rows, grouped_tiles, sort_by_key

M, E = 40, 5


def routing(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    expert = rng.integers(0, E, M)
    expert[expert == 3] = 1  # an expert nobody chose
    return expert, rng.random(M) < 0.8


def reference(expert, keep, tile: int, capacity: int | None):
    """(row of each assignment or P, its owner of each row or M, sizes) by dealing rows."""
    P = E * capacity if capacity else grouped_tiles(M, E, tile) * tile
    row, owner, next_row = np.full(M, P), np.full(P, M), 0
    sizes = np.zeros(E, int)
    for e in range(E):
        mine = [m for m in range(M) if keep[m] and expert[m] == e]
        sizes[e] = len(mine)
        first = e * capacity if capacity else next_row
        for rank, m in enumerate(mine):
            if capacity is None or rank < capacity:
                row[m], owner[first + rank] = first + rank, m
        next_row += -(-len(mine) // tile) * tile
    return row, owner, sizes


@pytest.mark.parametrize(("tile", "capacity"), [(1, None), (4, None), (6, 6), (20, 20)])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_layout_deals_each_expert_its_assignments_in_order(tile, capacity, seed):
    expert, keep = routing(seed)
    rows = assign_rows(jnp.asarray(expert), jnp.asarray(keep), E, tile, capacity)
    row, owner, sizes = reference(expert, keep, tile, capacity)
    np.testing.assert_array_equal(np.asarray(rows.row_M), row)
    np.testing.assert_array_equal(np.asarray(rows.assignment_P), owner)
    np.testing.assert_array_equal(np.asarray(rows.sizes_E), sizes)
    np.testing.assert_array_equal(np.asarray(rows.kept_M), row < owner.shape[0])
    tile_of_row = np.arange(owner.shape[0]) // tile
    owned = owner < M
    assert np.all(np.asarray(rows.tile_expert_G)[tile_of_row[owned]] == expert[owner[owned]])
    assert capacity != 6 or not np.all(np.asarray(rows.kept_M) == keep)  # some were dropped


def test_the_sort_gives_the_order_its_inverse_and_each_key_start():
    key = jnp.asarray([2, 0, 3, 2, 0, 3, 1, 2])
    order, position, starts = sort_by_key(key, 3)
    np.testing.assert_array_equal(np.asarray(order), [1, 4, 6, 0, 3, 7, 2, 5])
    np.testing.assert_array_equal(np.asarray(order)[np.asarray(position)], np.arange(8))
    np.testing.assert_array_equal(np.asarray(starts), [0, 2, 3, 6])


def test_the_layout_lowers_without_a_scatter():
    expert, keep = routing(0)
    for tile, capacity in ((1, None), (4, None), (8, 8)):
        lowered = jax.jit(assign_rows, static_argnums=(2, 3, 4)).lower(
            jnp.asarray(expert), jnp.asarray(keep), E, tile, capacity
        )
        text = lowered.as_text()
        assert "sort" in text and "scatter" not in text, (tile, capacity)
        if tile == 1:  # rows sorted by expert: their places in the order, no gather either
            assert "gather" not in text
