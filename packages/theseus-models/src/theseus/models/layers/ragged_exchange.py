"""A ragged exchange over one mesh axis: each device sends every peer a different number of
rows, and each receives them packed, in sender order, into a buffer of a fixed ``room``.

Inside ``jax.shard_map``. The sender lays its rows out by peer (the rows for peer 0, then
peer 1, ...) and says how many it has for each (``counts_P``); :func:`plan_routes` shares
those counts (one all-gather of P integers) so that every device knows where its rows land
in each receiver's buffer. A receiver takes its senders' rows in sender order until its
room is full; the tail of a chunk that would not fit is not sent (the sender sees which
rows went in ``Routes.send_sizes``). :func:`exchange` moves the rows, and
``Routes.back()`` is the way home: the receiver's rows return to the very rows of the
sender's buffer they came from.

Only what is sent travels: ``jax.lax.ragged_all_to_all`` (``native``) moves each chunk's
rows and no padding, on TPU. XLA:CPU has no ``ragged-all-to-all``, so there
(``native=False``) the same exchange runs as an all-gather of every sender's buffer from
which each device picks its rows: the same result, bit for bit, at P times the traffic, for
checking a TPU configuration's numerics on a CPU. Its gradient is the exchange back (a
custom VJP), the same for both.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Routes(NamedTuple):
    """One device's side of an exchange, each a (P,) int32 array indexed by peer."""

    input_offsets: jax.Array  # where my rows for peer p start in my send buffer
    send_sizes: jax.Array  # how many of them I send (the rest did not fit)
    output_offsets: jax.Array  # where they land in peer p's buffer
    recv_sizes: jax.Array  # how many rows peer p sends me
    received_at: jax.Array  # where peer p's rows land in my buffer
    sent_from: jax.Array  # where peer p's rows for me start in its send buffer

    def back(self) -> Routes:
        """The exchange that returns every received row to where it was sent from."""
        return Routes(
            self.received_at,
            self.recv_sizes,
            self.sent_from,
            self.send_sizes,
            self.input_offsets,
            self.output_offsets,
        )


def plan_routes(counts_P: jax.Array, room: int, axis: str) -> Routes:
    """Routes for sending ``counts_P[p]`` rows to each peer p (laid out by peer in the send
    buffer) into receive buffers of ``room`` rows, filled in sender order."""
    counts_SxR = jax.lax.all_gather(counts_P.astype(jnp.int32), axis)  # [sender, receiver]
    return routes_from_counts(counts_SxR, room, axis)


def routes_from_counts(counts_SxR: jax.Array, room: int, axis: str) -> Routes:
    """:func:`plan_routes` from every device's counts, already shared ([sender, receiver])."""
    me = jax.lax.axis_index(axis)
    lands_SxR = jnp.cumsum(counts_SxR, axis=0) - counts_SxR  # offset in the receiver's buffer
    sent_SxR = jnp.clip(room - lands_SxR, 0, counts_SxR)  # what fits
    starts_SxR = jnp.cumsum(counts_SxR, axis=1) - counts_SxR  # offset in the sender's buffer
    return Routes(
        starts_SxR[me],
        sent_SxR[me],
        lands_SxR[me],
        sent_SxR[:, me],
        lands_SxR[:, me],
        starts_SxR[:, me],
    )


def exchange(rows: jax.Array, routes: Routes, room: int, axis: str, native: bool) -> jax.Array:
    """``rows`` (floats; leading axis: the send buffer) sent as ``routes`` say, into a
    zero-filled buffer of ``room`` rows on each receiver; differentiable in ``rows``."""
    return _differentiable(axis, native, room, rows.shape[0], rows, routes)


def _send(rows: jax.Array, routes: Routes, room: int, axis: str, native: bool) -> jax.Array:
    out = jnp.zeros((room, *rows.shape[1:]), rows.dtype)
    if native:  # the result varies over the axes its buffer does: those of the rows
        missing = tuple(_varying(rows) - _varying(out))
        out = jax.lax.pcast(out, missing, to="varying") if missing else out
        return jax.lax.ragged_all_to_all(rows, out, *routes[:4], axis_name=axis)
    return _gathered(rows, out, routes, axis)


def arrived_groups(routes: Routes, counts_PxG: jax.Array, room: int) -> jax.Array:
    """The group of each row of the receive buffer (-1 where nothing arrived), when every
    sender p laid its rows for this device out in G consecutive groups of
    ``counts_PxG[p]`` rows: what the receiver can tell from the counts alone, so the
    groups need not travel beside the rows."""
    source_R, offset_R, filled_R = _sources(routes, room)
    ends_RxG = jnp.cumsum(counts_PxG.astype(jnp.int32), axis=1)[source_R]
    group_R = jnp.sum(offset_R[:, None] >= ends_RxG, axis=1, dtype=jnp.int32)
    return jnp.where(filled_R, group_R, -1)


def _sources(routes: Routes, room: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """For each row of the receive buffer: the sender whose rows cover it, its place among
    them, and whether any does."""
    r_R = jnp.arange(room, dtype=jnp.int32)
    begin_P, size_P = routes.received_at, routes.recv_sizes
    covers_PxR = (r_R >= begin_P[:, None]) & (r_R < (begin_P + size_P)[:, None])
    source_R = jnp.argmax(covers_PxR, axis=0)
    return source_R, r_R - begin_P[source_R], jnp.any(covers_PxR, axis=0)


def _gathered(rows: jax.Array, out: jax.Array, routes: Routes, axis: str) -> jax.Array:
    """The exchange from an all-gather: output row r is row ``sent_from[p] + r -
    received_at[p]`` of sender p, for the p whose rows cover r."""
    every_PxNx = jax.lax.all_gather(rows, axis)
    source_R, offset_R, filled_R = _sources(routes, out.shape[0])
    index_R = routes.sent_from[source_R] + offset_R
    picked = every_PxNx[source_R, jnp.where(filled_R, index_R, 0)]
    mask = filled_R.reshape(-1, *([1] * (rows.ndim - 1)))
    return jnp.where(mask, picked, out)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _differentiable(
    axis: str, native: bool, room: int, sent_rows: int, rows: jax.Array, routes: Routes
) -> jax.Array:
    return _send(rows, routes, room, axis, native)


def _forward(axis, native, room, sent_rows, rows, routes):
    return _send(rows, routes, room, axis, native), routes


def _backward(axis, native, room, sent_rows, routes, grad):
    """A linear map's transpose: every received row's gradient goes back to the row it was
    sent from; rows that were not sent get zero."""
    grad_rows = _send(grad, routes.back(), sent_rows, axis, native)
    no_grad = jax.tree.map(lambda a: jnp.zeros(a.shape, jax.dtypes.float0), routes)
    return grad_rows, no_grad


_differentiable.defvjp(_forward, _backward)


def _varying(x: jax.Array) -> frozenset:
    """The mesh axes a value inside ``shard_map`` varies over."""
    return jax.typeof(x).manual_axis_type.varying
