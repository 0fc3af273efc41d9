"""Grouped matmuls for dropless experts: rows sorted by group, each through its group's matrix.

``grouped_matmul(x_MxK, w_ExKxN, sizes_E)`` is ``jax.lax.ragged_dot`` with its own gradient:

* the weight gradient is :func:`grouped_weight_gradient`, a Pallas kernel that does the routed
  work and says so in the program. XLA:TPU writes ``ragged_dot``'s own weight gradient (jax
  0.10) as a matmul masked per group, every row with every group's block: E times the routed
  FLOPs as written, and so priced by any reading of the program (the step estimate). On a
  v5e at 8 experts the chip ran it at about the routed work all the same (a profiled
  Mixtral-style step: 0.47 ms per weight gradient, the kernel 0.42 ms).
* the forward pass and the input gradient (``row_products``) are ``ragged_dot`` (on TPU
  XLA's grouped-matmul kernel, which does the routed work), or :func:`grouped_rows_product`,
  theseus's Pallas kernel for them. In a profiled Mixtral-style step on a v5e the weight
  gradient kernel ran at 83% of the chip's peak and ``ragged_dot``'s products at about 57%.

Both kernels walk the row tiles of every group in order. A tile that holds the end of one
group and the start of the next is visited once for each, its other rows masked to zero; a
group with no rows is visited once, on nothing. Hence at most ``tiles + E - 1`` visits; the
schedule (which group, which tile) is computed on the device from the group sizes and given
to the kernel as scalars. The weight gradient accumulates one group's visits per block of
its output (a group with no rows gets zeros); the row products accumulate one row tile's
visits (the tiles past the groups get zeros).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from theseus.models.layers.varying import summed_like, varying_alike

KERNEL_NAME = "tgmm_theseus"  # the HLO's custom call: the step estimate counts its FLOPs
ROWS_KERNEL_NAME = "gmm_theseus"  # the forward and input-gradient products' kernel
ROW_TILE = 512  # rows per visit at most
MAX_BLOCK = 1024  # the output block's sides at most (VMEM: float32 accumulator + 2 buffers)


def _block(size: int) -> int:
    """The largest side <= MAX_BLOCK that divides ``size`` in multiples of 128, else whole."""
    for side in range(min(size, MAX_BLOCK) // 128 * 128, 0, -128):
        if size % side == 0:
            return side
    return size


def row_tile(rows: int) -> int:
    """Rows per visit: ``ROW_TILE``, or fewer (a multiple of 8) for short inputs."""
    return min(ROW_TILE, max(8, -(-rows // 8) * 8))


def count_at_most(ends_E: jax.Array, at_X: jax.Array) -> jax.Array:
    """How many of the sorted ``ends_E`` are <= each of ``at_X`` (``searchsorted`` on the
    right, by comparing with all of them: its binary search is a loop of gathers, which TPUs
    run one index at a time; a v5e spent 16 ms a layer on it over 131,072 queries)."""
    return jnp.sum(ends_E <= at_X[..., None], axis=-1, dtype=jnp.int32)


def visit_schedule(
    sizes_E: jax.Array, tiles: int, tile: int, *, every_tile: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(group_V, tile_V, live_V, starts_E, ends_E)`` for ``V = tiles + E - 1`` visits.

    Visit v reads row tile ``tile_V[v]`` for group ``group_V[v]``; groups come in order, each
    with one visit per tile its rows touch (one for an empty group). Visits past the last real
    one repeat it with ``live_V`` 0: they add nothing. ``every_tile``: the last group's visits
    run on to the last tile, so that every tile is visited (a kernel writing row tiles then
    writes zeros past the groups); still at most V visits, since neighbouring groups share
    at most one tile.
    """
    E = sizes_E.shape[0]
    V = tiles + E - 1
    sizes_E = sizes_E.astype(jnp.int32)
    ends_E = jnp.cumsum(sizes_E)
    starts_E = ends_E - sizes_E
    first_E = jnp.minimum(starts_E // tile, tiles - 1)
    last_E = jnp.where(sizes_E > 0, (ends_E - 1) // tile, first_E)
    if every_tile:
        last_E = jnp.where(jnp.arange(E) == E - 1, tiles - 1, last_E)
    count_E = last_E - first_E + 1
    visit_ends_E = jnp.cumsum(count_E)
    v_V = jnp.arange(V, dtype=jnp.int32)
    group_V = jnp.minimum(count_at_most(visit_ends_E, v_V), E - 1)
    offset_V = v_V - (visit_ends_E - count_E)[group_V]
    tile_V = jnp.minimum(first_E[group_V] + offset_V, last_E[group_V])
    live_V = (v_V < visit_ends_E[-1]).astype(jnp.int32)
    return group_V.astype(jnp.int32), tile_V.astype(jnp.int32), live_V, starts_E, ends_E


def _kernel(group_V, tile_V, live_V, starts_E, ends_E, x_ref, dy_ref, out_ref, acc_ref, *, tile):
    from jax.experimental import pallas as pl

    v, visits = pl.program_id(2), pl.num_programs(2)
    group = group_V[v]
    first = jnp.logical_or(v == 0, group_V[jnp.maximum(v - 1, 0)] != group)
    last = jnp.logical_or(v == visits - 1, group_V[jnp.minimum(v + 1, visits - 1)] != group)

    @pl.when(first)
    def _start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(live_V[v] == 1)
    def _accumulate():
        rows = tile_V[v] * tile + jax.lax.broadcasted_iota(jnp.int32, (tile, 1), 0)
        mine = jnp.logical_and(rows >= starts_E[group], rows < ends_E[group])
        x = jnp.where(mine, x_ref[...], jnp.zeros((), x_ref.dtype))
        acc_ref[...] += jax.lax.dot_general(
            x, dy_ref[...], (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32
        )

    @pl.when(last)
    def _write():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def grouped_weight_gradient(
    x_MxK: jax.Array, dy_MxN: jax.Array, sizes_E: jax.Array, *, interpret: bool = False
) -> jax.Array:
    """``out[e] = x[rows of e].T @ dy[rows of e]`` (ExKxN, in ``x``'s dtype, summed in
    float32), the rows of group e being ``sizes_E[e]`` consecutive ones after the groups
    before it; rows past the groups add nothing."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    M, K = x_MxK.shape
    N = dy_MxN.shape[1]
    E = sizes_E.shape[0]
    x_MxK, dy_MxN = varying_alike(x_MxK, dy_MxN)  # the result varies as both (in a shard_map)
    tile = row_tile(M)
    padded = -(-M // tile) * tile
    if padded != M:  # whole tiles; the rows added belong to no group
        x_MxK = jnp.pad(x_MxK, ((0, padded - M), (0, 0)))
        dy_MxN = jnp.pad(dy_MxN, ((0, padded - M), (0, 0)))
    tiles = padded // tile
    bk, bn = _block(K), _block(N)
    schedule = visit_schedule(sizes_E, tiles, tile)
    visits = schedule[0].shape[0]

    def x_block(k, n, v, group_V, tile_V, *_):
        return tile_V[v], k

    def dy_block(k, n, v, group_V, tile_V, *_):
        return tile_V[v], n

    def out_block(k, n, v, group_V, *_):
        return group_V[v], k, n

    return pl.pallas_call(
        functools.partial(_kernel, tile=tile),
        out_shape=jax.ShapeDtypeStruct(
            (E, K, N), x_MxK.dtype, manual_axis_type=jax.typeof(x_MxK).mat
        ),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(schedule),
            grid=(K // bk, N // bn, visits),
            in_specs=[pl.BlockSpec((tile, bk), x_block), pl.BlockSpec((tile, bn), dy_block)],
            out_specs=pl.BlockSpec((None, bk, bn), out_block),
            scratch_shapes=[pltpu.VMEM((bk, bn), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=64 * 1024 * 1024,
        ),
        interpret=interpret,
        name=KERNEL_NAME,
    )(*schedule, x_MxK, dy_MxN)


def _rows_kernel(
    group_V, tile_V, live_V, starts_E, ends_E, x_ref, w_ref, out_ref, acc_ref, *, tile, dims
):
    from jax.experimental import pallas as pl

    v, k = pl.program_id(1), pl.program_id(2)
    visits, steps = pl.num_programs(1), pl.num_programs(2)
    here = tile_V[v]
    first = jnp.logical_or(v == 0, tile_V[jnp.maximum(v - 1, 0)] != here)
    last = jnp.logical_or(v == visits - 1, tile_V[jnp.minimum(v + 1, visits - 1)] != here)

    @pl.when(jnp.logical_and(first, k == 0))
    def _start():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    group = group_V[v]
    touches = jnp.logical_and(here * tile < ends_E[group], (here + 1) * tile > starts_E[group])

    @pl.when(jnp.logical_and(live_V[v] == 1, touches))  # not the tiles past the groups
    def _accumulate():
        rows = here * tile + jax.lax.broadcasted_iota(jnp.int32, (tile, 1), 0)
        mine = jnp.logical_and(rows >= starts_E[group], rows < ends_E[group])
        x = jnp.where(mine, x_ref[...], jnp.zeros((), x_ref.dtype))
        acc_ref[...] += jax.lax.dot_general(
            x, w_ref[...], (dims, ((), ())), preferred_element_type=jnp.float32
        )

    @pl.when(jnp.logical_and(last, k == steps - 1))
    def _write():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def grouped_rows_product(
    x_MxK: jax.Array,
    w_ExKxN: jax.Array,
    sizes_E: jax.Array,
    *,
    transpose_w: bool = False,
    interpret: bool = False,
) -> jax.Array:
    """``ragged_dot(x, w, sizes)`` as a Pallas kernel: row block e of x (``sizes_E[e]`` rows
    after the groups before it) times ``w[e]`` (``transpose_w``: times ``w[e].T``, the input
    gradient's product, without a transposed copy of w); rows past the groups are zeros.

    The kernel visits the row tiles in order, each tile once for every group its rows hold
    (the other rows masked), and the tiles past the groups once (the schedule's
    ``every_tile``); one row tile's visits accumulate in float32 in VMEM. Consecutive visits
    of one group read the same block of w, which the pipeline then does not fetch again.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    M, K = x_MxK.shape
    N = w_ExKxN.shape[1] if transpose_w else w_ExKxN.shape[2]
    x_MxK, w_ExKxN = varying_alike(x_MxK, w_ExKxN)
    tile = row_tile(M)
    padded = -(-M // tile) * tile
    if padded != M:  # whole tiles; the rows added belong to no group
        x_MxK = jnp.pad(x_MxK, ((0, padded - M), (0, 0)))
    bk, bn = _block(K), _block(N)
    schedule = visit_schedule(sizes_E, padded // tile, tile, every_tile=True)
    visits = schedule[0].shape[0]

    def x_block(n, v, k, group_V, tile_V, *_):
        return tile_V[v], k

    def w_block(n, v, k, group_V, *_):
        return (group_V[v], n, k) if transpose_w else (group_V[v], k, n)

    def out_block(n, v, k, group_V, tile_V, *_):
        return tile_V[v], n

    w_shape = (None, bn, bk) if transpose_w else (None, bk, bn)
    dims = ((1,), (1,)) if transpose_w else ((1,), (0,))
    y = pl.pallas_call(
        functools.partial(_rows_kernel, tile=tile, dims=dims),
        out_shape=jax.ShapeDtypeStruct(
            (padded, N), x_MxK.dtype, manual_axis_type=jax.typeof(x_MxK).mat
        ),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(schedule),
            grid=(N // bn, visits, K // bk),
            in_specs=[pl.BlockSpec((tile, bk), x_block), pl.BlockSpec(w_shape, w_block)],
            out_specs=pl.BlockSpec((tile, bn), out_block),
            scratch_shapes=[pltpu.VMEM((tile, bn), jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary", "arbitrary"),
            vmem_limit_bytes=64 * 1024 * 1024,
        ),
        interpret=interpret,
        name=ROWS_KERNEL_NAME,
    )(*schedule, x_MxK, w_ExKxN)
    return y[:M] if padded != M else y


# how ``grouped_matmul`` computes its weight gradient: the kernel (TPU), the kernel in Pallas'
# interpreter (any backend, outside a shard_map: the interpreter's slicing is refused under
# shard_map's varying-axes check), or ragged_dot's own
WEIGHT_GRADIENTS = ("kernel", "interpret", "xla")


def weight_gradient_for(platform: str) -> str:
    """The kernel on TPU; elsewhere ragged_dot's own weight gradient (the kernel is TPU's)."""
    return "kernel" if platform == "tpu" else "xla"


def _rows(x_MxK, w_ExKxN, sizes_E, how: str, transpose_w: bool = False) -> jax.Array:
    """A rows-times-groups product by ``how`` (one of ``WEIGHT_GRADIENTS``: the kernel, the
    kernel interpreted, or ``ragged_dot``)."""
    if how == "xla":
        w = jnp.swapaxes(w_ExKxN, 1, 2) if transpose_w else w_ExKxN
        return jax.lax.ragged_dot(x_MxK, w, sizes_E)
    interpret = how == "interpret"
    return grouped_rows_product(
        x_MxK, w_ExKxN, sizes_E, transpose_w=transpose_w, interpret=interpret
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def grouped_matmul(
    x_MxK: jax.Array,
    w_ExKxN: jax.Array,
    sizes_E: jax.Array,
    weight_gradient: str = "kernel",
    row_products: str = "xla",
) -> jax.Array:
    """``ragged_dot(x, w, sizes)``: row block e of x (``sizes_E[e]`` rows, in order) times
    ``w[e]``, with the weight gradient of :func:`grouped_weight_gradient` and the forward
    product and input gradient of :func:`grouped_rows_product` or ``ragged_dot``
    (``row_products``); each one of ``WEIGHT_GRADIENTS``."""
    for name, how in (("weight_gradient", weight_gradient), ("row_products", row_products)):
        if how not in WEIGHT_GRADIENTS:
            raise ValueError(f"{name}={how!r}: one of {WEIGHT_GRADIENTS}")
    return _rows(x_MxK, w_ExKxN, sizes_E, row_products)


def _forward(x_MxK, w_ExKxN, sizes_E, weight_gradient, row_products):
    y = grouped_matmul(x_MxK, w_ExKxN, sizes_E, weight_gradient, row_products)
    return y, (x_MxK, w_ExKxN, sizes_E)


def _backward(weight_gradient, row_products, saved, dy_MxN):
    x_MxK, w_ExKxN, sizes_E = saved
    dy_MxN = dy_MxN.astype(x_MxK.dtype)
    dx_MxK = _rows(dy_MxN, w_ExKxN, sizes_E, row_products, transpose_w=True)
    if weight_gradient == "xla":
        dw_ExKxN = jax.vjp(lambda w: jax.lax.ragged_dot(x_MxK, w, sizes_E), w_ExKxN)[1](dy_MxN)[0]
    else:
        interpret = weight_gradient == "interpret"
        dw_ExKxN = grouped_weight_gradient(x_MxK, dy_MxN, sizes_E, interpret=interpret)
    sizes_zero = jnp.zeros(sizes_E.shape, jax.dtypes.float0)
    dx_MxK = summed_like(dx_MxK, x_MxK)
    return dx_MxK, summed_like(dw_ExKxN, w_ExKxN).astype(w_ExKxN.dtype), sizes_zero


grouped_matmul.defvjp(_forward, _backward)
