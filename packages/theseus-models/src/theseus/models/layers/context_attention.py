"""Self-attention over sequences split along the ``context`` mesh axis: ring or all-gather.

Each of the N devices of ``context`` holds its share of every sequence (queries, keys, values
and segment ids of its chunks; ``theseus.core.sharding.sequence``: under ``zigzag`` device d
holds chunks d and 2N - 1 - d of 2N). The output is the attention one device computes over
the whole sequence (causal, per document, sliding window, grouped heads); only the order of
the float32 sums differs.

* ``ring``: key/value blocks travel around the devices (``jax.lax.ppermute`` to the next one,
  N - 1 hops) while each device folds every block it holds into the online softmax of its own
  queries: ``flash.accumulate`` carries the flash kernel's running max, sum and output on
  from one device's block to the next, so the merge is the kernel's own. Memory: one block in
  flight. The backward pass (a custom VJP) sends the blocks round again, each with the
  gradients of its keys and values accumulating on the way, and a last hop brings those
  gradients home: no device ever holds every key.
* ``all_gather``: each device gathers every key and value (``jax.lax.all_gather``) and runs
  the same accumulation over them; the gather's transpose (a reduce-scatter) returns their
  gradients. Simpler, N times the key/value memory: for comparison, and for short contexts.

The blocks are the flash kernel's (``layers/flash.py``): it returns the logsumexp a merge
needs and its backward takes the final one. Positions are restored from the device index
(``chunk_starts``), so each (query chunk, key chunk) pair is a flash call with a ``shift``;
a pair the causal or window mask removes entirely is an empty loop, and under ``zigzag`` each
ring step costs every device the same (half the pairs, or the two diagonal halves).

Shapes: B batch, H query heads, G kv heads (R = H / G), T sequence, K head_dim; inside a
device, lower case: b rows, g kv heads, t = T / N positions, C chunks of c positions, each
padded to P (whole flash blocks).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.core.sharding.sequence import check_sequence, chunk_starts, chunks_per_device
from theseus.models.layers.flash import (
    PAD_K,
    PAD_Q,
    Blocks,
    Partial,
    accumulate,
    finish,
    pad_axis,
    pair_gradients,
    row_dot,
)
from theseus.models.layers.mesh_axes import batch_axes, spec, tensor_axis_for

METHODS = ("ring", "all_gather")


class Plan(NamedTuple):
    """The static shape of one device's share: hashable, a ``custom_vjp`` static argument."""

    method: str
    order: str
    devices: int
    chunk: int  # c: positions per chunk
    chunks: int  # C: chunks per device
    blocks: Blocks  # flash blocks of one (query chunk, key chunk) pair, padded to P
    axis: str


def context_attention(
    q_BxHxTxK: jax.Array,
    k_BxGxTxK: jax.Array,
    v_BxGxTxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxT: jax.Array,
    *,
    method: str,
    order: str,
    sizes: Mapping[str, int],
    window: int = 0,
    block: int = 128,
) -> jax.Array:
    """softmax(q k^T / sqrt(K) + mask) v over the whole sequence, BxHxTxK, with T split over
    the ``context`` axis of a mesh of these axis ``sizes`` (the execution plan's; the step is
    traced under that mesh), in ``order``'s layout."""
    B, H, T, K = q_BxHxTxK.shape
    G = k_BxGxTxK.shape[1]
    devices = sizes.get(CONTEXT_AXIS, 1)
    chunk = check_sequence(T, devices, order)
    size = min(block, chunk)
    padded = -(-chunk // size) * size
    plan = Plan(
        method,
        order,
        devices,
        chunk,
        chunks_per_device(order),
        Blocks(size, size, padded // size, padded // size, True, window),
        CONTEXT_AXIS,
    )
    rows, heads = batch_axes(sizes), tensor_axis_for(sizes, H, G)
    x_spec, seg_spec = spec(rows, heads, CONTEXT_AXIS, None), spec(rows, CONTEXT_AXIS)

    def local(q_bxhxtxK, k_bxgxtxK, v_bxgxtxK, q_seg_bxt, k_seg_bxt):
        b, h, t, _ = q_bxhxtxK.shape
        g = k_bxgxtxK.shape[1]
        q_bxgxRxtxK = (q_bxhxtxK * (K**-0.5)).reshape(b, g, h // g, t, K)
        if method == "ring":
            out = _ring(plan, q_bxgxRxtxK, k_bxgxtxK, v_bxgxtxK, q_seg_bxt, k_seg_bxt)
        else:
            gather = partial(jax.lax.all_gather, axis_name=CONTEXT_AXIS, tiled=True)
            k_all, v_all = gather(k_bxgxtxK, axis=2), gather(v_bxgxtxK, axis=2)
            k_seg_all = gather(k_seg_bxt, axis=1)
            out = _over_gathered(plan, q_bxgxRxtxK, k_all, v_all, q_seg_bxt, k_seg_all)
        return out.reshape(b, h, t, K)

    return jax.shard_map(
        local,
        in_specs=(x_spec, x_spec, x_spec, seg_spec, seg_spec),
        out_specs=x_spec,
        check_vma=False,
    )(q_BxHxTxK, k_BxGxTxK, v_BxGxTxK, q_segment_BxT, k_segment_BxT)


# ---------------------------------------------------------------------- chunks of one device


def _chunked(plan: Plan, x: jax.Array, axis: int, value: int) -> jax.Array:
    """The t positions at ``axis`` as C chunks (a new leading axis), each padded to P."""
    shape = x.shape[:axis] + (plan.chunks, plan.chunk) + x.shape[axis + 1 :]
    chunks = jnp.moveaxis(x.reshape(shape), axis, 0)
    return pad_axis(chunks, axis + 1, plan.blocks.nq * plan.blocks.q, value)


def _unchunked(plan: Plan, x: jax.Array, axis: int) -> jax.Array:
    """Inverse of ``_chunked`` (``axis`` is the positions' axis of the result)."""
    x = jax.lax.slice_in_dim(x, 0, plan.chunk, axis=axis + 1)
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :])


def _query_chunks(plan: Plan, q_bxgxRxtxK: jax.Array, q_seg_bxt: jax.Array):
    return _chunked(plan, q_bxgxRxtxK, 3, 0), _chunked(plan, q_seg_bxt.astype(jnp.int32), 1, PAD_Q)


def _key_chunks(plan: Plan, k_bxgxtxK: jax.Array, v_bxgxtxK: jax.Array, k_seg_bxt: jax.Array):
    """Keys, values (CxbxgxPxK) and segment ids (CxbxP) of one device's chunks."""
    seg = _chunked(plan, k_seg_bxt.astype(jnp.int32), 1, PAD_K)
    return _chunked(plan, k_bxgxtxK, 2, 0), _chunked(plan, v_bxgxtxK, 2, 0), seg


def _starts(plan: Plan, device: jax.Array) -> jax.Array:
    """The first sequence position of each of ``device``'s chunks (C)."""
    starts = chunk_starts(device, plan.devices, plan.chunk, plan.order)
    return jnp.stack([jnp.asarray(s, jnp.int32) for s in starts])


def _pairs(plan: Plan, body, init):
    """``body(a, b, carry)`` for every (query chunk a, key chunk b): one loop, one body."""
    C = plan.chunks
    return jax.lax.fori_loop(0, C * C, lambda i, carry: body(i // C, i % C, carry), init)


def _visit(plan: Plan, running: Partial, queries: tuple, keys: tuple) -> Partial:
    """Every query chunk's online softmax (stacked over C) continued over one device's keys."""
    q_C, q_seg_C, q_starts = queries
    k_C, v_C, k_seg_C, k_starts = keys

    def pair(a, b, running):
        state = Partial(*(x[a] for x in running))
        shift = q_starts[a] - k_starts[b]
        state = accumulate(
            plan.blocks, state, q_C[a], k_C[b], v_C[b], q_seg_C[a], k_seg_C[b], shift
        )
        return Partial(*(x.at[a].set(y) for x, y in zip(running, state, strict=True)))

    return _pairs(plan, pair, running)


def _visit_gradients(plan: Plan, grads: tuple, queries: tuple, keys: tuple) -> tuple:
    """(dq of every query chunk, dk and dv of one device's key chunks) added to ``grads``."""
    q_C, q_seg_C, q_starts, dout_C, lse_C, delta_C = queries
    k_C, v_C, k_seg_C, k_starts = keys

    def pair(a, b, grads):
        dq_C, dk_C, dv_C = grads
        dq, dk, dv = pair_gradients(
            plan.blocks,
            q_C[a],
            k_C[b],
            v_C[b],
            q_seg_C[a],
            k_seg_C[b],
            dout_C[a],
            lse_C[a],
            delta_C[a],
            q_starts[a] - k_starts[b],
        )
        return dq_C.at[a].add(dq), dk_C.at[b].add(dk), dv_C.at[b].add(dv)

    return _pairs(plan, pair, grads)


def _empty(q_C: jax.Array) -> Partial:
    """The online softmax before any key, stacked over the C query chunks."""
    C, rest = q_C.shape[0], q_C.shape[1:]
    return Partial(*(jnp.stack([x] * C) for x in Partial.empty(*rest)))


def _zeros_f32(*xs: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(jnp.zeros(x.shape, jnp.float32) for x in xs)


def _finished(plan: Plan, running: Partial, q_C: jax.Array, q_seg_C: jax.Array, dtype) -> tuple:
    """The output of every query chunk's finished softmax (bxgxRxtxK), and what the backward
    keeps of the forward: the query chunks, their segment ids, outputs and logsumexps."""
    out_C, lse_C = jax.vmap(lambda state: finish(state, dtype))(running)
    return _unchunked(plan, out_C, 3), (q_C, q_seg_C, out_C, lse_C)


def _gradient_queries(plan: Plan, kept: tuple, dout_bxgxRxtxK: jax.Array) -> tuple:
    """This device's index, and what its queries bring to a backward pass over key blocks
    (``kept``: the forward's query chunks, segment ids, outputs and logsumexps): chunks,
    segment ids, chunk starts, the output's gradient, logsumexps and flash's ``dout . out``."""
    q_C, q_seg_C, out_C, lse_C = kept
    dout_C = _chunked(plan, dout_bxgxRxtxK, 3, 0)
    device = jax.lax.axis_index(plan.axis)
    return device, (q_C, q_seg_C, _starts(plan, device), dout_C, lse_C, row_dot(dout_C, out_C))


def _input_gradients(plan: Plan, dq_C: jax.Array, dk: jax.Array, dv: jax.Array, like: tuple):
    """The custom VJP's gradients of (q, k, v, q_seg, k_seg): dq from its chunks, each in its
    input's dtype (``like``: q chunks, k, v), none for the segment ids."""
    q_C, k, v = like
    return (
        _unchunked(plan, dq_C, 3).astype(q_C.dtype),
        dk.astype(k.dtype),
        dv.astype(v.dtype),
        None,
        None,
    )


def _with_saved_keys(forward, backward):
    """Attention ``forward(plan, q, k, v, q_seg, k_seg) -> (out, kept)`` as a custom VJP whose
    residuals are ``kept`` and the keys, values and key segment ids as given (``backward``
    takes them, and the output's gradient)."""

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def attend(plan: Plan, q, k, v, q_seg, k_seg):
        return forward(plan, q, k, v, q_seg, k_seg)[0]

    def attend_fwd(plan: Plan, q, k, v, q_seg, k_seg):
        out, kept = forward(plan, q, k, v, q_seg, k_seg)
        return out, (*kept, k, v, k_seg)

    attend.defvjp(attend_fwd, backward)
    return attend


# ---------------------------------------------------------------------- ring


def _pass_on(plan: Plan, tree):
    """Every device sends ``tree`` to the next one on the ring (and gets the previous one's)."""
    ring = [(d, (d + 1) % plan.devices) for d in range(plan.devices)]
    return jax.tree.map(lambda x: jax.lax.ppermute(x, plan.axis, ring), tree)


def _ring_forward(plan: Plan, q, k, v, q_seg, k_seg):
    """N steps: fold in the blocks held, pass them on. After s passes a device holds the
    blocks of device - s; the N-th pass (blocks back home) is not needed but keeps one loop
    body (one program) for every step."""
    q_C, q_seg_C = _query_chunks(plan, q, q_seg)
    device = jax.lax.axis_index(plan.axis)
    queries = (q_C, q_seg_C, _starts(plan, device))

    def step(s, carry):
        running, kv = carry
        arriving = _pass_on(plan, kv)  # sent before the compute, so the two can overlap
        source = _starts(plan, (device - s) % plan.devices)
        return _visit(plan, running, queries, (*kv, source)), arriving

    kv = _key_chunks(plan, k, v, k_seg)
    running, _ = jax.lax.fori_loop(0, plan.devices, step, (_empty(q_C), kv))
    return _finished(plan, running, q_C, q_seg_C, q.dtype)


def _ring_bwd(plan: Plan, residuals: tuple, dout_bxgxRxtxK: jax.Array) -> tuple:
    """The blocks go round again, each with the (dk, dv) of its keys, which every device adds
    to; after N passes those gradients are back on the device that holds the keys."""
    *kept, k, v, k_seg = residuals
    device, queries = _gradient_queries(plan, tuple(kept), dout_bxgxRxtxK)
    q_C = queries[0]

    def step(s, carry):
        dq_C, kv, dkv = carry
        arriving = _pass_on(plan, kv)
        source = _starts(plan, (device - s) % plan.devices)
        dq_C, *dkv = _visit_gradients(plan, (dq_C, *dkv), queries, (*kv, source))
        return dq_C, arriving, _pass_on(plan, tuple(dkv))

    kv = _key_chunks(plan, k, v, k_seg)
    carry = (*_zeros_f32(q_C), kv, _zeros_f32(kv[0], kv[1]))
    dq_C, _, (dk_C, dv_C) = jax.lax.fori_loop(0, plan.devices, step, carry)
    dk, dv = _unchunked(plan, dk_C, 2), _unchunked(plan, dv_C, 2)
    return _input_gradients(plan, dq_C, dk, dv, (q_C, k, v))


_ring = _with_saved_keys(_ring_forward, _ring_bwd)


# ---------------------------------------------------------------------- all-gather


def _source(plan: Plan, x: jax.Array, j: jax.Array, axis: int) -> jax.Array:
    """Device ``j``'s t positions out of the gathered N t."""
    t = x.shape[axis] // plan.devices
    return jax.lax.dynamic_slice_in_dim(x, j * t, t, axis)


def _gathered_keys(plan: Plan, k_all, v_all, k_seg_all, j: jax.Array) -> tuple:
    """Device ``j``'s key chunks out of the gathered ones."""
    parts = (_source(plan, k_all, j, 2), _source(plan, v_all, j, 2), _source(plan, k_seg_all, j, 1))
    return _key_chunks(plan, *parts)


def _gathered_forward(plan: Plan, q, k_all, v_all, q_seg, k_seg_all):
    q_C, q_seg_C = _query_chunks(plan, q, q_seg)
    queries = (q_C, q_seg_C, _starts(plan, jax.lax.axis_index(plan.axis)))

    def visit(j, running):
        kv = _gathered_keys(plan, k_all, v_all, k_seg_all, j)
        return _visit(plan, running, queries, (*kv, _starts(plan, j)))

    running = jax.lax.fori_loop(0, plan.devices, visit, _empty(q_C))
    return _finished(plan, running, q_C, q_seg_C, q.dtype)


def _over_gathered_bwd(plan: Plan, residuals: tuple, dout_bxgxRxtxK: jax.Array) -> tuple:
    """dq, and the gradients of every gathered key and value (the gather's transpose sums
    them back onto the devices that hold them)."""
    *kept, k_all, v_all, k_seg_all = residuals
    _, queries = _gradient_queries(plan, tuple(kept), dout_bxgxRxtxK)
    q_C = queries[0]

    def visit(j, carry):
        dq_C, dk_all, dv_all = carry
        kv = _gathered_keys(plan, k_all, v_all, k_seg_all, j)
        grads = (dq_C, *_zeros_f32(kv[0], kv[1]))
        dq_C, dk_C, dv_C = _visit_gradients(plan, grads, queries, (*kv, _starts(plan, j)))
        t = k_all.shape[2] // plan.devices
        dk_all = jax.lax.dynamic_update_slice_in_dim(dk_all, _unchunked(plan, dk_C, 2), j * t, 2)
        dv_all = jax.lax.dynamic_update_slice_in_dim(dv_all, _unchunked(plan, dv_C, 2), j * t, 2)
        return dq_C, dk_all, dv_all

    dq_C, dk_all, dv_all = jax.lax.fori_loop(0, plan.devices, visit, _zeros_f32(q_C, k_all, v_all))
    return _input_gradients(plan, dq_C, dk_all, dv_all, (q_C, k_all, v_all))


_over_gathered = _with_saved_keys(_gathered_forward, _over_gathered_bwd)
