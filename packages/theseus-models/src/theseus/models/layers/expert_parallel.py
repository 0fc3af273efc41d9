"""Expert parallelism: a mixture's experts split over the ``expert`` mesh axis, tokens sent to
them and back with ``jax.lax.all_to_all`` inside ``jax.shard_map``.

Each of the P devices of ``expert`` holds E / P experts (contiguous: device p has experts
``[p E/P, (p + 1) E/P)``) and, since ``expert`` also splits the batch, its own tokens. The
router runs on every device's tokens as usual; then, per device:

1. its n x k assignments are packed into a send buffer, one slab per destination device;
2. ``all_to_all`` delivers slab p to device p, which now holds the rows every device sent to
   its experts;
3. those rows go through :func:`theseus.models.layers.moe.routed_rows`, the layer's own routed
   computation (dropless tiles, ``ragged_dot`` or capacity), unchanged, with the local experts;
4. a second ``all_to_all`` returns every row's output to the device its token lives on, which
   sums each token's k outputs with its router weights.

Buffers have static shapes, so what one device may send to another is bounded:

* dropless (``capacity_factor=0`` and ``sharding.expert_capacity=0``): a slab holds every assignment of the sender (all of them
  may choose experts of one device), so nothing is ever dropped and the result equals the
  single-device layer; the price is buffers of P x (n k) rows on the receiving side, and on
  backends where padding rows are computed (the ``tiles`` grouping everywhere, ``ragged_dot``
  off TPU) up to P times the routed expert FLOPs. ``ragged_dot`` on TPU computes the rows
  that arrived only.
* with a capacity (``capacity_factor`` > 0, or for a dropless layer the execution plan's
  ``expert_capacity``: ``sharding.expert_capacity``, 1.25 by default): each device applies the layer's capacity rule to
  its own tokens (each expert takes at most ``ceil(f n k / E)`` of them, first choices first,
  then in token order) and sends exactly those rows: buffers and FLOPs are the capacity's,
  as in GShard. Drops are decided per device, so they equal the single-device layer run on
  each device's tokens separately (not on the whole batch at once); the reported drop
  fraction is over every token.

That is the ``slabs`` dispatch. The ``ragged`` one (the plan's default on TPU for a dropless
layer) sends exactly each device's assignments with ``ragged_all_to_all``
(``layers/ragged_exchange.py``, :func:`_ragged`): no padding on the links, the capacity
applied by each receiver to what arrives for its experts (pooled over every sender).

With ``expert`` of size 1 (a dropless layer whose tokens the mesh splits) there is nothing to
exchange: each device runs the layer's own computation on its own tokens, which spares the
whole-batch sort a single routing over a split batch would need.

Expert weights sharded over ``fsdp`` too enter the ``shard_map`` as their shards and are
all-gathered inside it, so that their gradients leave reduce-scattered (gathered at the
boundary instead, each device all-reduced every weight's whole gradient); an expert hidden
width split over ``tensor`` stays split, each device computing a partial output summed over
``tensor``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from theseus.core.sharding.gathered import traced_param_spec
from theseus.core.sharding.rules import BATCH_AXES, CONTEXT_AXIS, EXPERT_AXIS
from theseus.models.errors import ModelError
from theseus.models.layers.expert_rows import (
    assign_rows,
    combine,
    dropless_tile,
    expert_capacity,
    routed_rows,
    routing_stats,
    sort_by_key,
    swiglu_experts,
)
from theseus.models.layers.mesh_axes import spec, tensor_axis_for
from theseus.models.layers.ragged_exchange import arrived_groups, exchange, routes_from_counts
from theseus.models.layers.row_permutes import collect_rows, dispatch_rows


class Plan(NamedTuple):
    """The static shape of one device's exchange."""

    devices: int  # P
    n_experts: int  # E
    k: int
    capacity_factor: float
    grouping: str
    weight_gradient: str  # how the grouped grouping computes it (grouped_matmul)
    dispatch: str  # slabs | ragged | ragged_gathered (ExecutionPlan.expert_dispatch)
    tensor: str | None  # the mesh axis splitting the experts' hidden width, if any
    token_axes: tuple[str, ...]  # the mesh axes splitting the tokens
    # the batch axes splitting the embed dimension of (w_gate and w_up, w_down), gathered
    # inside the shard_map so that their gradients are reduce-scattered
    gathers: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def expert_parallel(
    moe: Any, x_BxTxD: jax.Array, valid_BxT: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``moe``'s routed experts (BxTxD) over the ``expert`` axis of its plan's mesh (the one the
    step is traced under), and the routing statistics of every token (``routing_stats``).

    Each device routes its own tokens (``moe.route``, inside the ``shard_map``: top-k over a
    batch split across devices would otherwise be gathered) and sums its own statistics,
    then one all-reduce adds them up.
    """
    sizes = dict(moe.mesh_sizes)
    devices = sizes.get(EXPERT_AXIS, 1)
    E = moe.n_experts
    if E % devices:
        raise ModelError(
            f"sharding.expert={devices} does not divide the layer's {E} experts: "
            "use a divisor of the expert count"
        )
    w_gate, w_up, w_down = moe.expert_weights()
    tensor = tensor_axis_for(sizes, w_gate.shape[-1])
    # every batch axis, even of size 1 (the expert weights vary over ``expert`` whatever its
    # size, and so do the outputs computed from them)
    names = tuple(sizes)
    rows = tuple(a for a in BATCH_AXES if a in names)
    sequence = CONTEXT_AXIS if CONTEXT_AXIS in names else None
    tokens = (*rows, sequence) if sequence else rows
    # the layer's own capacity, else the one the execution plan sized the dispatch by
    capacity = float(moe.capacity_factor) or float(moe.dispatch_capacity)
    # the batch axes splitting each weight's embed dimension (fsdp): gathered inside
    gathers = (
        _embed_split(w_gate.shape, ("experts", "embed", "mlp"), 1),
        _embed_split(w_down.shape, ("experts", "mlp", "embed"), 2),
    )
    plan = Plan(
        devices,
        E,
        moe.k,
        capacity,
        moe.grouping,
        moe.weight_gradient,
        moe.dispatch,
        tensor,
        tokens,
        gathers,
    )
    tokens3, tokens2 = spec(rows, sequence, None), spec(rows, sequence)
    w_in = spec(EXPERT_AXIS, gathers[0] or None, tensor)
    w_out = spec(EXPERT_AXIS, tensor, gathers[1] or None)
    return jax.shard_map(
        partial(_local, plan, moe.route),
        in_specs=(tokens3, tokens2, w_in, w_in, w_out),
        out_specs=(tokens3, PartitionSpec()),
    )(x_BxTxD, valid_BxT, w_gate, w_up, w_down)


def _embed_split(shape: tuple[int, ...], logical: tuple[str, ...], dim: int) -> tuple[str, ...]:
    """The batch axes (fsdp's) the traced layout splits dimension ``dim`` of an expert weight
    over; none outside a step."""
    split = traced_param_spec(shape, logical)
    if split is None or split[dim] is None:
        return ()
    axes = split[dim] if isinstance(split[dim], tuple) else (split[dim],)
    return tuple(a for a in axes if a in BATCH_AXES)


def _gathered(w: jax.Array, axes: tuple[str, ...], dim: int) -> jax.Array:
    """``w`` whole along ``dim`` (an all-gather over ``axes``, whose gradient is a
    reduce-scatter: each device receives its shard's sum, not the whole sum)."""
    return jax.lax.all_gather(w, axes, axis=dim, tiled=True) if axes else w


def _exchange(plan: Plan, x: jax.Array) -> jax.Array:
    """Slab p of the leading axis goes to device p; slab p of the result came from device p
    (one device: nothing to send, each device routes its own tokens to its own experts)."""
    if plan.devices == 1:
        return x
    return jax.lax.all_to_all(x, EXPERT_AXIS, 0, 0, tiled=True)


def _local(plan: Plan, route, x_bxtxD, valid_bxt, w_gate, w_up, w_down):
    w_gate, w_up = (_gathered(w, plan.gathers[0], 1) for w in (w_gate, w_up))
    w_down = _gathered(w_down, plan.gathers[1], 2)
    b, t, D = x_bxtxD.shape
    probs_bxtxE, top_e_bxtxk, top_w_bxtxk = route(x_bxtxD)
    n, k, P = b * t, plan.k, plan.devices
    local_experts = plan.n_experts // P
    x_nxD = x_bxtxD.reshape(n, D).astype(w_gate.dtype)  # the layer's compute dtype
    expert_M = top_e_bxtxk.reshape(n, k).T.reshape(n * k)  # k-major, as the layer orders them
    weights = (w_gate, w_up, w_down)
    counts_drops = plan.capacity_factor > 0 or plan.dispatch != "slabs"
    if plan.dispatch != "slabs" and P > 1:
        y_MxD, kept, asked = _ragged(plan, x_nxD, expert_M, valid_bxt, weights)
    elif plan.capacity_factor > 0:
        y_MxD, kept, asked = _with_capacity(plan, x_nxD, expert_M, valid_bxt, weights)
    else:
        y_MxD = _dropless(plan, x_nxD, expert_M, local_experts, weights)
        kept = asked = jnp.zeros((), jnp.float32)
    y_nxD = combine(y_MxD, top_w_bxtxk.reshape(n, k).astype(y_MxD.dtype))
    if plan.tensor is not None:  # each device multiplied with its slice of the hidden width
        y_nxD = jax.lax.psum(y_nxD, plan.tensor)
    dropped = jnp.zeros((), jnp.float32)
    if counts_drops:
        kept, asked = (jax.lax.psum(c, plan.token_axes) for c in (kept, asked))
        dropped = 1.0 - kept / jnp.maximum(asked, 1.0)
    stats = routing_stats(probs_bxtxE, top_e_bxtxk, valid_bxt, plan.n_experts, dropped)
    summed = ("counts", "prob_sums", "tokens")
    stats |= {name: jax.lax.psum(stats[name], plan.token_axes) for name in summed}
    return y_nxD.reshape(b, t, D), stats


def _dropless(plan: Plan, x_nxD, expert_M, local_experts: int, weights):
    """Slabs of n k rows (room for every assignment); the receiver groups what arrives by its
    local expert and runs the dropless layout over it."""
    M, P = expert_M.shape[0], plan.devices
    every = jnp.ones((M,), bool)
    if P == 1:  # the experts are all here: the layer's own computation on these tokens
        return routed_rows(
            x_nxD,
            expert_M,
            every,
            weights,
            capacity=None,
            grouping=plan.grouping,
            weight_gradient=plan.weight_gradient,
            unkept_read=False,  # every assignment has a row
        )[0]
    peer_M = expert_M // local_experts
    # row of each assignment in the send buffer: slab of its peer, in assignment order
    send = assign_rows(peer_M, every, P, M, M)
    send_M, assignment_S = send.row_M, send.assignment_P
    x_SxD = dispatch_rows(x_nxD, send_M, assignment_S)
    sent_S = assignment_S < M
    expert_S = jnp.where(sent_S, expert_M[jnp.minimum(assignment_S, M - 1)] % local_experts, -1)
    x_RxD, expert_R = _exchange(plan, x_SxD), _exchange(plan, expert_S)  # R = P M rows arrived
    arrived_R = expert_R >= 0
    y_RxD, _ = routed_rows(
        x_RxD,
        jnp.maximum(expert_R, 0),
        arrived_R,
        weights,
        capacity=None,
        grouping=plan.grouping,
        weight_gradient=plan.weight_gradient,
        tile=dropless_tile(M, local_experts),  # sized for the rows expected, not the room
        unkept_read=False,  # the rows where nothing arrived go back but are not collected
    )
    return collect_rows(_exchange(plan, y_RxD), send_M, assignment_S)


def _with_capacity(plan: Plan, x_nxD, expert_M, valid_bxt, weights):
    """The layer's capacity rule on this device's tokens: expert e's C rows are buffer rows
    [e C, (e + 1) C), so slab p holds exactly device p's experts' rows."""
    M, E, P = expert_M.shape[0], plan.n_experts, plan.devices
    local_experts = E // P
    capacity = expert_capacity(plan.capacity_factor, M, E)
    keep_M = jnp.tile(valid_bxt.reshape(-1), plan.k)  # padding tokens claim no row
    rows = assign_rows(expert_M, keep_M, E, capacity, capacity)
    row_M, kept_M, assignment_S = rows.row_M, rows.kept_M, rows.assignment_P
    x_SxD = dispatch_rows(x_nxD, row_M, assignment_S)
    D = x_SxD.shape[-1]
    x_R = _exchange(plan, x_SxD).reshape(P, local_experts, capacity, D)  # [source, expert, row]
    x_ExRxD = x_R.transpose(1, 0, 2, 3).reshape(local_experts, P * capacity, D)
    matmul = partial(jnp.einsum, "eci,eio->eco")
    y_ExRxD = swiglu_experts(x_ExRxD, weights, matmul)
    y_R = y_ExRxD.reshape(local_experts, P, capacity, D).transpose(1, 0, 2, 3)
    y_SxD = _exchange(plan, y_R.reshape(P * local_experts * capacity, D))
    y_MxD = collect_rows(y_SxD, row_M, assignment_S)
    return y_MxD, jnp.sum(kept_M).astype(jnp.float32), jnp.sum(keep_M).astype(jnp.float32)


def ragged_room(capacity_factor: float, assignments: int, local_experts: int, devices: int):
    """(rows a device's receive buffer holds, rows each of its experts takes) in the ragged
    dispatch: each local expert takes ``ceil(f n k / L)`` of the rows that arrive (``f`` x
    what it gets when the routing is balanced) and the buffer holds all of them; a factor of
    0 is dropless: room for every device's assignments, no cap."""
    if capacity_factor <= 0:
        return devices * assignments, None
    capacity = expert_capacity(capacity_factor, assignments, local_experts)
    return local_experts * capacity, capacity


def _ragged(plan: Plan, x_nxD, expert_M, valid_bxt, weights):
    """Each device sends exactly its assignments, ordered by expert (in assignment order
    within one: first choices first), with ``ragged_all_to_all``; the receiver tells each
    row's local expert from every sender's counts (one all-gather of E integers, which
    also gives the routes) and groups
    what arrived by it. With a capacity factor the receiver's buffer holds ``ragged_room``
    rows, filled in sender order (what would overflow it is not sent: the tail of a
    sender's rows), and each local expert takes its capacity of them in arrival order (the
    capacity layout, one batched matmul); dropless, the dropless layout over all that came."""
    M, P, E = expert_M.shape[0], plan.devices, plan.n_experts
    local_experts = E // P
    native = plan.dispatch == "ragged"
    keep_M = jnp.tile(valid_bxt.reshape(-1), plan.k)  # padding tokens send nothing
    key_M = jnp.where(keep_M, expert_M, E).astype(jnp.int32)  # E: not sent, sorted last
    # order_M: send-buffer row -> assignment; position_M: its inverse
    order_M, position_M, starts_E1 = sort_by_key(key_M, E)
    counts_E = jnp.diff(starts_E1)
    room, capacity = ragged_room(plan.capacity_factor, M, local_experts, P)
    counts_PxE = jax.lax.all_gather(counts_E, EXPERT_AXIS)  # [sender, expert]: one gather
    counts_PxP = counts_PxE.reshape(P, P, local_experts).sum(axis=2)  # [sender, receiver]
    routes = routes_from_counts(counts_PxP, room, EXPERT_AXIS)
    mine = jax.lax.axis_index(EXPERT_AXIS) * local_experts
    counts_PxL = jax.lax.dynamic_slice_in_dim(counts_PxE, mine, local_experts, axis=1)
    expert_R = arrived_groups(routes, counts_PxL, room)
    # the send buffer, by expert: a permutation of the assignments (no index falls outside)
    x_SxD = dispatch_rows(x_nxD, position_M, order_M, zeros=False)
    x_RxD = exchange(x_SxD, routes, room, EXPERT_AXIS, native)
    y_RxD, kept_R = routed_rows(
        x_RxD,
        jnp.maximum(expert_R, 0),
        expert_R >= 0,  # rows that arrived
        weights,
        capacity=capacity,
        grouping=plan.grouping,
        weight_gradient=plan.weight_gradient,
        tile=dropless_tile(M, local_experts),  # sized for the rows expected, not the room
        # dropless, every row that arrived is kept and the others are not sent back; with a
        # capacity, the rows past it go back and must be zeros
        unkept_read=capacity is not None,
    )
    y_SxD = exchange(y_RxD, routes.back(), M, EXPERT_AXIS, native)  # zeros: not sent
    y_MxD = collect_rows(y_SxD, position_M, order_M, zeros=False)  # back in assignment order
    # kept as a receiver, asked as a sender: both summed over every device by the caller
    kept = jnp.sum(kept_R).astype(jnp.float32)
    return y_MxD, kept, jnp.sum(keep_M).astype(jnp.float32)
