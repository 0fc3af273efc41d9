"""Moving a mixture's rows into the expert buffer and back, with gathers both ways.

The M = k N assignments are in k-major order: assignment m carries token ``m mod N`` (its
``m // N``-th choice) and owns buffer row ``row_M[m]`` (rows are unique; an assignment without
one points past the buffer). ``assignment_P`` is the inverse: the assignment of each buffer
row, M for a row nobody owns.

``jnp.take``'s gradient is a scatter-add, which TPUs run slowly (two scatters took 7% of a
Mixtral-style step on a v5e). Both moves here are permutations with known inverses, so each
gradient is a gather too:

* :func:`dispatch_rows` (token rows -> buffer rows): a token's gradient is the sum of its k
  assignments' rows, gathered through ``row_M``;
* :func:`collect_rows` (buffer rows -> assignment rows): a buffer row's gradient is its
  assignment's, gathered through ``assignment_P`` (zero for a row nobody owns).

A row nobody owns reads zeros, and so does an assignment without a row: each gather is
followed by a select over the whole buffer. ``zeros=False`` drops the select (an index past
the end reads the last row instead) where the caller knows no such read matters: for rows
sorted by expert, the rows nobody owns lie past the groups, which a grouped matmul neither
computes from nor differentiates into, and an assignment without a row is one whose output
its caller never reads. Qwen3-30B-A3B over an expert axis of 8 on v5p-64 spent 0.45 s of
its 4.3 s estimated step on those selects, each over the receive buffer's 524,288 rows.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from theseus.models.layers.varying import summed_like


def _take(x: jax.Array, index: jax.Array, zeros: bool) -> jax.Array:
    if zeros:
        return jnp.take(x, index, axis=0, mode="fill", fill_value=0)
    return jnp.take(x, index, axis=0, mode="clip")


def _no_gradient(index: jax.Array) -> jax.Array:
    return jnp.zeros(index.shape, jax.dtypes.float0)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def dispatch_rows(
    x_NxD: jax.Array, row_M: jax.Array, assignment_P: jax.Array, zeros: bool = True
) -> jax.Array:
    """Buffer row p holds its owner's token row (zeros where nobody owns it; ``zeros=False``:
    any token's): PxD."""
    N, M = x_NxD.shape[0], row_M.shape[0]
    token_P = jnp.where(assignment_P < M, assignment_P % N, N)
    return _take(x_NxD, token_P, zeros)


def _dispatch_forward(x_NxD, row_M, assignment_P, zeros):
    # an empty view of x keeps its row count and its type, no bytes
    saved = (x_NxD[:, :0], row_M, assignment_P)
    return dispatch_rows(x_NxD, row_M, assignment_P, zeros), saved


def _dispatch_backward(zeros, saved, dy_PxD):
    x_NxD, row_M, assignment_P = saved
    N = x_NxD.shape[0]
    k = row_M.shape[0] // N
    dy_kxNxD = _take(dy_PxD, row_M, zeros).reshape(k, N, -1)
    dx_NxD = jnp.sum(dy_kxNxD.astype(jnp.float32), axis=0).astype(dy_PxD.dtype)
    return summed_like(dx_NxD, x_NxD), _no_gradient(row_M), _no_gradient(assignment_P)


dispatch_rows.defvjp(_dispatch_forward, _dispatch_backward)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def collect_rows(
    y_PxD: jax.Array, row_M: jax.Array, assignment_P: jax.Array, zeros: bool = True
) -> jax.Array:
    """Each assignment's buffer row (zeros for one without a row; ``zeros=False``: the last
    row's): MxD."""
    return _take(y_PxD, row_M, zeros)


def _collect_forward(y_PxD, row_M, assignment_P, zeros):
    return collect_rows(y_PxD, row_M, assignment_P, zeros), (y_PxD[:0], row_M, assignment_P)


def _collect_backward(zeros, saved, dy_MxD):
    y_PxD, row_M, assignment_P = saved
    dy_PxD = summed_like(_take(dy_MxD, assignment_P, zeros), y_PxD)
    return dy_PxD, _no_gradient(row_M), _no_gradient(assignment_P)


collect_rows.defvjp(_collect_forward, _collect_backward)
