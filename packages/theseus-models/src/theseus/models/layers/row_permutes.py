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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from theseus.models.layers.varying import summed_like


def owners(row_M: jax.Array, rows: int) -> jax.Array:
    """``assignment_P``: the assignment owning each of ``rows`` buffer rows (M: none)."""
    M = row_M.shape[0]
    return (
        jnp.full((rows,), M, jnp.int32).at[row_M].set(jnp.arange(M, dtype=jnp.int32), mode="drop")
    )


def _take(x: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take(x, index, axis=0, mode="fill", fill_value=0)


def _no_gradient(index: jax.Array) -> jax.Array:
    return jnp.zeros(index.shape, jax.dtypes.float0)


@jax.custom_vjp
def dispatch_rows(x_NxD: jax.Array, row_M: jax.Array, assignment_P: jax.Array) -> jax.Array:
    """Buffer row p holds its owner's token row (zeros where nobody owns it): PxD."""
    N, M = x_NxD.shape[0], row_M.shape[0]
    token_P = jnp.where(assignment_P < M, assignment_P % N, N)
    return _take(x_NxD, token_P)


def _dispatch_forward(x_NxD, row_M, assignment_P):
    # an empty view of x keeps its row count and its type, no bytes
    return dispatch_rows(x_NxD, row_M, assignment_P), (x_NxD[:, :0], row_M, assignment_P)


def _dispatch_backward(saved, dy_PxD):
    x_NxD, row_M, assignment_P = saved
    N = x_NxD.shape[0]
    k = row_M.shape[0] // N
    dy_kxNxD = _take(dy_PxD, row_M).reshape(k, N, -1)
    dx_NxD = jnp.sum(dy_kxNxD.astype(jnp.float32), axis=0).astype(dy_PxD.dtype)
    return summed_like(dx_NxD, x_NxD), _no_gradient(row_M), _no_gradient(assignment_P)


dispatch_rows.defvjp(_dispatch_forward, _dispatch_backward)


@jax.custom_vjp
def collect_rows(y_PxD: jax.Array, row_M: jax.Array, assignment_P: jax.Array) -> jax.Array:
    """Each assignment's buffer row (zeros for one without a row): MxD."""
    return _take(y_PxD, row_M)


def _collect_forward(y_PxD, row_M, assignment_P):
    return collect_rows(y_PxD, row_M, assignment_P), (y_PxD[:0], row_M, assignment_P)


def _collect_backward(saved, dy_MxD):
    y_PxD, row_M, assignment_P = saved
    dy_PxD = summed_like(_take(dy_MxD, assignment_P), y_PxD)
    return dy_PxD, _no_gradient(row_M), _no_gradient(assignment_P)


collect_rows.defvjp(_collect_forward, _collect_backward)
