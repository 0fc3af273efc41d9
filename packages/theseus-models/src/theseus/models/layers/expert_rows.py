"""How a mixture's (token, expert) assignments become rows of a buffer grouped by expert, run
through their experts' SwiGLU and come back (the layouts are ``layers/moe.py``'s docstring).

Shared by the layer on one device (``MoE.experts``) and by expert parallelism
(``layers/expert_parallel.py``), which runs :func:`routed_rows` unchanged on every device over
the rows the other devices sent it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from theseus.models.layers.grouped_matmul import count_at_most, grouped_matmul
from theseus.models.layers.row_permutes import collect_rows, dispatch_rows

MAX_TILE = 512  # rows per tile in the dropless layout, at most
PAD_SHARE = 8  # the tiles' padding adds at most 1 / PAD_SHARE of the routed rows

SORTED_ROWS = ("ragged_dot", "grouped", "pallas")  # unpadded rows sorted by expert
Matmul = Callable[[jax.Array, jax.Array], jax.Array]  # (rows, w_ExIxO) -> rows x O


def dropless_tile(assignments: int, n_experts: int) -> int:
    """Rows per tile: the largest power of two <= assignments / (PAD_SHARE E), in [1, MAX_TILE].

    Padding each of the E groups to whole tiles adds fewer than E x tile rows, at most
    1 / PAD_SHARE of the assignments; smaller tiles pad less but gather more weight copies
    (one per tile).
    """
    tile = max(1, assignments // (PAD_SHARE * n_experts))
    return min(1 << (tile.bit_length() - 1), MAX_TILE)


def expert_capacity(factor: float, assignments: int, n_experts: int) -> int:
    """Rows each expert owns: ``ceil(factor * assignments / n_experts)``, at least 1."""
    return max(1, math.ceil(factor * assignments / n_experts))


def grouped_tiles(assignments: int, n_experts: int, tile: int) -> int:
    """Tiles enough for any split of ``assignments`` rows into ``n_experts`` padded groups."""
    return (assignments + n_experts * (tile - 1)) // tile


def sort_by_key(key_M: jax.Array, n_keys: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The M assignments ordered by ``key_M`` (in [0, n_keys], stable), without a scatter.

    Returns ``order_M`` (sorted position -> assignment), ``position_M`` (its inverse, the
    order sorted in turn) and ``starts_K1`` (for each key 0..n_keys, the assignments with a
    smaller key: where its run starts; the last entry counts the keys below n_keys).
    """
    order_M = jnp.argsort(key_M, stable=True).astype(jnp.int32)
    position_M = jnp.argsort(order_M).astype(jnp.int32)
    below_K1 = jnp.arange(n_keys + 1, dtype=jnp.int32)[:, None]
    starts_K1 = jnp.sum(key_M[None, :] < below_K1, axis=1, dtype=jnp.int32)
    return order_M, position_M, starts_K1


def lookup(table_T: jax.Array, index_X: jax.Array) -> jax.Array:
    """``table_T[index_X]`` for a short table (a mixture's experts), as a compare and a sum
    over the table rather than a gather: TPUs gather one index at a time, and a lookup of
    each of 131,072 assignments took 1.2 ms of a layer on a v5e."""
    hits_XT = index_X[..., None] == jnp.arange(table_T.shape[0], dtype=index_X.dtype)
    return jnp.sum(jnp.where(hits_XT, table_T, 0), axis=-1, dtype=table_T.dtype)


class RowAssignment(NamedTuple):
    """Where each of M assignments goes in a buffer of P = G x tile rows grouped by expert."""

    row_M: jax.Array  # the assignment's row; P where it has none
    kept_M: jax.Array  # whether it got one
    tile_expert_G: jax.Array  # the expert of each tile of ``tile`` rows
    sizes_E: jax.Array  # rows asked of each expert
    assignment_P: jax.Array  # the inverse: the assignment owning each row; M for none


def assign_rows(
    expert_M: jax.Array, keep_M: jax.Array, n_experts: int, tile: int, capacity: int | None
) -> RowAssignment:
    """Buffer rows of the M assignments, grouped by expert, in assignment order within one.

    ``expert_M``: each assignment's expert; ``keep_M``: whether it asks for a row at all.
    Dropless (``capacity`` None): the groups follow each other, each padded to whole tiles
    (``tile=1``: no padding, the rows sorted by expert). With a capacity: expert e owns the
    rows ``[e C, (e + 1) C)`` (``tile`` = C) and the assignments ranked past C are dropped.

    Built from two sorts, with neither a scatter nor a gather of one index per assignment
    where it can be helped: TPUs run both one index at a time. The first sort orders the
    assignments by expert; sorting that order gives each assignment its place in it (the
    inverse permutation). Rows sorted by expert are those places; padded layouts add each
    expert's first row (a ``lookup``) and read a row's owner back through the order.
    """
    E = n_experts
    M = expert_M.shape[0]
    key_M = jnp.where(keep_M, expert_M, E).astype(jnp.int32)  # E: no row, sorted last
    order_M, position_M, starts_E1 = sort_by_key(key_M, E)
    sizes_E = jnp.diff(starts_E1)
    if capacity is None and tile == 1:  # the rows are the places in the order
        row_M = jnp.where(keep_M, position_M, M)
        assignment_P = jnp.where(jnp.arange(M) < starts_E1[E], order_M, M)
        expert_P = jnp.minimum(count_at_most(starts_E1[1:], jnp.arange(M)), E - 1)
        return RowAssignment(row_M, keep_M, expert_P, sizes_E, assignment_P.astype(jnp.int32))
    rank_M = position_M - lookup(starts_E1, key_M)
    if capacity is None:
        G = grouped_tiles(M, E, tile)
        tiles_E = (sizes_E + tile - 1) // tile
        tile_ends_E = jnp.cumsum(tiles_E)
        first_row_E = tile * (tile_ends_E - tiles_E)
        kept_M = keep_M
        row_M = lookup(first_row_E, jnp.minimum(key_M, E - 1)) + rank_M
        tiles_G = jnp.arange(G, dtype=jnp.int32)
        tile_expert_G = jnp.minimum(count_at_most(tile_ends_E, tiles_G), E - 1)
    else:
        G = E
        kept_M = keep_M & (rank_M < capacity)
        row_M = key_M * capacity + rank_M
        tile_expert_G = jnp.arange(E, dtype=jnp.int32)
        first_row_E = capacity * tile_expert_G
    P = G * tile
    row_M = jnp.where(kept_M, row_M, P).astype(jnp.int32)
    expert_P = jnp.repeat(tile_expert_G, tile)
    rank_P = jnp.arange(P, dtype=jnp.int32) - lookup(first_row_E, expert_P)
    held_P = rank_P < jnp.minimum(lookup(sizes_E, expert_P), capacity or M)
    slot_P = jnp.clip(lookup(starts_E1, expert_P) + rank_P, 0, M - 1)
    assignment_P = jnp.where(held_P, order_M[slot_P], M).astype(jnp.int32)
    return RowAssignment(row_M, kept_M, tile_expert_G.astype(jnp.int32), sizes_E, assignment_P)


def tile_matmul(x_GxCxI: jax.Array, w_ExIxO: jax.Array, tile_expert_G: jax.Array) -> jax.Array:
    """``x[g] @ w[tile_expert_G[g]]`` for every tile g: a batched matmul over gathered weights.

    Checkpointed: the backward pass gathers the tiles' weights again rather than keeping the
    G x I x O copy alive (a gather, no FLOPs; the matmul itself is not redone).
    """

    @jax.checkpoint
    def gathered(x_GxCxI: jax.Array, w_ExIxO: jax.Array, tile_expert_G: jax.Array) -> jax.Array:
        w_GxIxO = jnp.take(w_ExIxO, tile_expert_G, axis=0, mode="clip")
        return jnp.einsum("gci,gio->gco", x_GxCxI, w_GxIxO)

    return gathered(x_GxCxI, w_ExIxO, tile_expert_G)


def swiglu_experts(
    x: jax.Array, weights: tuple[jax.Array, jax.Array, jax.Array], matmul: Matmul
) -> jax.Array:
    """SwiGLU through the experts' ``(w_gate, w_up, w_down)``; ``matmul`` picks the rows'."""
    w_gate, w_up, w_down = weights
    return matmul(jax.nn.silu(matmul(x, w_gate)) * matmul(x, w_up), w_down)


def routed_rows(
    x_NxD: jax.Array,
    expert_M: jax.Array,
    keep_M: jax.Array,
    weights: tuple[jax.Array, jax.Array, jax.Array],
    *,
    capacity: int | None,
    grouping: str = "tiles",
    tile: int | None = None,
    weight_gradient: str = "kernel",
    unkept_read: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Each assignment's expert output, MxD (zeros where it got no row), and ``kept_M``.

    The M = k N assignments are k-major: assignment m sends row ``x_NxD[m mod N]`` to expert
    ``expert_M[m]`` of the E whose stacked weights are ``weights``; ``keep_M`` False asks for no row. The buffer layout is
    the module docstring's: with ``capacity`` (rows per expert) the capacity layout, else the
    dropless one (``tile``: rows per tile, by default ``dropless_tile``; ``ragged_dot`` and
    ``grouped``, ``pallas``: none, the rows sorted by expert; ``weight_gradient``: how
    ``grouped`` and ``pallas`` run theseus's kernels, ``grouped_matmul.WEIGHT_GRADIENTS``). Expert parallelism runs this unchanged on each device, over
    the rows the others sent it.

    ``unkept_read=False``: the caller never reads the output of an assignment without a row
    (or every assignment has one), so with rows sorted by expert the moves skip their zeros
    (``row_permutes``); the tiles and capacity layouts compute every row of a tile and keep
    them.
    """
    E, M, D = weights[0].shape[0], expert_M.shape[0], x_NxD.shape[-1]
    if capacity is not None:
        tile = capacity
    elif grouping in SORTED_ROWS:
        tile = 1
    elif tile is None:
        tile = dropless_tile(M, E)
    rows = assign_rows(expert_M, keep_M, E, tile, capacity)
    row_M, kept_M, sizes_E, assignment_P = rows.row_M, rows.kept_M, rows.sizes_E, rows.assignment_P
    G = rows.tile_expert_G.shape[0]
    if M % x_NxD.shape[0]:
        raise ValueError(f"{M} assignments are no whole number of choices of {x_NxD.shape[0]} rows")
    zeros = unkept_read or capacity is not None or grouping not in SORTED_ROWS
    x_PxD = dispatch_rows(x_NxD, row_M, assignment_P, zeros)
    if capacity is not None:  # expert e's C rows are tile e
        matmul: Matmul = partial(jnp.einsum, "eci,eio->eco")
        y_PxD = swiglu_experts(x_PxD.reshape(E, tile, D), weights, matmul).reshape(-1, D)
    elif grouping == "ragged_dot":  # rows sorted by expert, sizes_E of each
        matmul = partial(jax.lax.ragged_dot, group_sizes=sizes_E)
        y_PxD = swiglu_experts(x_PxD, weights, matmul)
    elif grouping == "grouped":  # the same, with theseus's weight-gradient kernel
        matmul = partial(_grouped, sizes_E, weight_gradient, "xla")
        y_PxD = swiglu_experts(x_PxD, weights, matmul)
    elif grouping == "pallas":  # theseus's kernels for all three products
        matmul = partial(_grouped, sizes_E, weight_gradient, weight_gradient)
        y_PxD = swiglu_experts(x_PxD, weights, matmul)
    else:
        matmul = partial(tile_matmul, tile_expert_G=rows.tile_expert_G)
        y_PxD = swiglu_experts(x_PxD.reshape(G, tile, D), weights, matmul).reshape(-1, D)
    return collect_rows(y_PxD, row_M, assignment_P, zeros), kept_M


def _grouped(
    sizes_E: jax.Array, weight_gradient: str, row_products: str, x: jax.Array, w: jax.Array
) -> jax.Array:
    return grouped_matmul(x, w, sizes_E, weight_gradient, row_products)


def combine(y_MxD: jax.Array, top_w_Nxk: jax.Array) -> jax.Array:
    """Each token's k expert outputs (rows m = choice * N + token) summed with its weights."""
    N, k = top_w_Nxk.shape
    return jnp.einsum("knd,kn->nd", y_MxD.reshape(k, N, -1), top_w_Nxk.T)


def routing_stats(
    probs_xE: jax.Array, top_e_xk: jax.Array, valid_x: jax.Array, n_experts: int, dropped: jax.Array
) -> dict[str, jax.Array]:
    """What the load-balancing loss and the router-health statistics need, over the valid
    tokens (any leading axes): ``counts`` (E) assignments per expert, ``prob_sums`` (E)
    router probability sums, ``tokens``, and ``drop_fraction`` (``dropped``)."""
    v_x = valid_x.astype(jnp.float32)
    chosen_xkE = jax.nn.one_hot(top_e_xk, n_experts, dtype=jnp.float32)
    lead = tuple(range(v_x.ndim))
    return {
        "counts": jnp.sum(chosen_xkE * v_x[..., None, None], axis=(*lead, v_x.ndim)),
        "prob_sums": jnp.sum(probs_xE * v_x[..., None], axis=lead),
        "tokens": jnp.sum(v_x),
        "drop_fraction": dropped,
    }
