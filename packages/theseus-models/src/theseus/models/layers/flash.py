"""Memory-efficient attention in pure JAX: blockwise online softmax, blocks recomputed backward.

The queries go through ``lax.scan`` one block of ``block_q`` rows at a time; each block walks
the key blocks it can see in a ``lax.fori_loop``, keeping a running row maximum ``m``, a running
sum of exponentials ``l`` and the unnormalised output (the online softmax of Milakov & Gimelshein,
as in FlashAttention). Only the output and the per-row logsumexp ``lse = m + log(l)`` are saved
for the backward pass, which recomputes each block's probabilities ``exp(s - lse)``: memory is
linear in the sequence length, and no score matrix larger than ``block_q x block_k`` per head
ever exists. The loops are real loops (one block in the program, whatever the length).

Masks: a query sees a key with the same segment id (0, padding, included: like the reference
mask, padding attends to padding and its outputs are ignored), at or before its own position
(``causal``), and less than ``window`` positions back (``window`` > 0). Key blocks that the
causal/window mask removes entirely are skipped. A row that sees no key gets zeros (and zero
gradients), never NaN. Lengths that are not a multiple of the block size are padded inside.

Shapes: B batch, H query heads, G kv heads (H = G * R; query head h uses kv head h // R),
T queries, S keys, K head_dim; Q = block_q, C = block_k; nq, nk the numbers of blocks.

The pieces are public for kernels that walk key blocks held elsewhere (context-parallel ring
attention, ``layers/context_attention.py``): ``accumulate`` continues the online softmax of
every query row (a :class:`Partial`) over one more run of keys, ``finish`` turns it into the
output and the logsumexp, and ``pair_gradients`` is the backward of one (queries, keys) pair
given the final logsumexp. ``shift`` places the queries against the keys: query row r sits at
position ``shift + r`` when key column c sits at ``c`` (0 for self-attention).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

NEG_INF = -1e30  # finite: a fully masked block keeps m finite, and exp(m_old - m_new) defined
PAD_Q, PAD_K = -1, -2  # segment ids of the internal padding: they match nothing


class Blocks(NamedTuple):
    """The static layout: block sizes, block counts and the mask's shape."""

    q: int
    k: int
    nq: int
    nk: int
    causal: bool
    window: int


def flash_attention(
    q_BxHxTxK: jax.Array,
    k_BxGxSxK: jax.Array,
    v_BxGxSxK: jax.Array,
    q_segment_BxT: jax.Array,
    k_segment_BxS: jax.Array,
    *,
    causal: bool = True,
    window: int = 0,
    block_q: int = 128,
    block_k: int = 128,
    scale: float | None = None,
) -> jax.Array:
    """softmax(scale q k^T + mask) v, BxHxTxK (``scale`` 1 / sqrt(K) unless given); queries
    and keys at positions 0, 1, ..."""
    B, H, T, K = q_BxHxTxK.shape
    G, S = k_BxGxSxK.shape[1], k_BxGxSxK.shape[2]
    bq, bk = min(block_q, T), min(block_k, S)
    blocks = Blocks(bq, bk, -(-T // bq), -(-S // bk), causal, window)
    scale = K**-0.5 if scale is None else scale
    q_BxGxRxTxK = (q_BxHxTxK * scale).reshape(B, G, H // G, T, K)
    q_BxGxRxTpxK = pad_axis(q_BxGxRxTxK, 3, blocks.nq * bq, 0)
    k_BxGxSpxK = pad_axis(k_BxGxSxK, 2, blocks.nk * bk, 0)
    v_BxGxSpxK = pad_axis(v_BxGxSxK, 2, blocks.nk * bk, 0)
    q_seg_BxTp = pad_axis(q_segment_BxT.astype(jnp.int32), 1, blocks.nq * bq, PAD_Q)
    k_seg_BxSp = pad_axis(k_segment_BxS.astype(jnp.int32), 1, blocks.nk * bk, PAD_K)
    out = _flash(blocks, q_BxGxRxTpxK, k_BxGxSpxK, v_BxGxSpxK, q_seg_BxTp, k_seg_BxSp)
    return out[:, :, :, :T].reshape(B, H, T, K)


def pad_axis(x: jax.Array, axis: int, length: int, value: int) -> jax.Array:
    if x.shape[axis] == length:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


def _key_range(blocks: Blocks, i: jax.Array, shift: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The key blocks [first, end) query block ``i`` can see through causality and window
    (empty, first >= end, when every key is after its queries or out of their window)."""
    first, end = jnp.int32(0), jnp.int32(blocks.nk)
    if blocks.causal:
        last_query = shift + (i + 1) * blocks.q - 1  # floor divisions: shift may be negative
        end = jnp.clip(last_query // blocks.k + 1, 0, blocks.nk)
        if blocks.window:
            first_seen = shift + i * blocks.q - blocks.window + 1
            first = jnp.clip(first_seen // blocks.k, 0, blocks.nk)
    return first, end


def _allowed(
    blocks: Blocks,
    i: jax.Array,
    j: jax.Array,
    q_seg_BxQ: jax.Array,
    k_seg_BxC: jax.Array,
    shift: jax.Array,
) -> jax.Array:
    """Which (query, key) pairs of blocks (i, j) the mask keeps, Bx1x1xQxC."""
    allowed_BxQxC = q_seg_BxQ[:, :, None] == k_seg_BxC[:, None, :]
    if blocks.causal:
        q_pos = shift + i * blocks.q + jnp.arange(blocks.q, dtype=jnp.int32)[:, None]
        k_pos = j * blocks.k + jnp.arange(blocks.k, dtype=jnp.int32)[None, :]
        allowed_BxQxC &= (k_pos <= q_pos)[None]
        if blocks.window:
            allowed_BxQxC &= (q_pos - k_pos < blocks.window)[None]
    return allowed_BxQxC[:, None, None]


def _key_block(x: jax.Array, j: jax.Array, size: int, axis: int) -> jax.Array:
    return jax.lax.dynamic_slice_in_dim(x, j * size, size, axis)


def _query_blocks(x: jax.Array, blocks: Blocks, axis: int) -> jax.Array:
    """Split the (padded) query axis into nq blocks and move the block index first."""
    shape = x.shape[:axis] + (blocks.nq, blocks.q) + x.shape[axis + 1 :]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def _unblock(x: jax.Array, axis: int) -> jax.Array:
    """Inverse of ``_query_blocks``: nq first -> one query axis at ``axis``."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2 :])


def _scores(q_BxGxRxQxK: jax.Array, k_BxGxCxK: jax.Array) -> jax.Array:
    return jnp.einsum(
        "bgrqk,bgck->bgrqc", q_BxGxRxQxK, k_BxGxCxK, preferred_element_type=jnp.float32
    )


class _Keys(NamedTuple):
    """The keys BxGxSxK, values BxGxSxK and key segment ids BxS one query block walks, with
    the block sizes and the queries' ``shift`` (their offset past the keys' first position)."""

    blocks: Blocks
    k_BxGxSxK: jax.Array
    v_BxGxSxK: jax.Array
    k_seg_BxS: jax.Array
    shift: jax.Array

    def walk(self, i: jax.Array, q_seg_BxQ: jax.Array, step: Callable, carry: Any) -> Any:
        """``carry`` through ``step(j, k_BxGxCxK, v_BxGxCxK, allowed, carry)`` over the key
        blocks j that query block ``i`` (segment ids ``q_seg_BxQ``) can see, in order;
        ``allowed`` says which of its rows may see which of block j's keys."""
        blocks, shift = self.blocks, self.shift

        def key_block(j: jax.Array, carry: Any) -> Any:
            k_BxGxCxK = _key_block(self.k_BxGxSxK, j, blocks.k, 2)
            v_BxGxCxK = _key_block(self.v_BxGxSxK, j, blocks.k, 2)
            k_seg_BxC = _key_block(self.k_seg_BxS, j, blocks.k, 1)
            allowed = _allowed(blocks, i, j, q_seg_BxQ, k_seg_BxC, shift)
            return step(j, k_BxGxCxK, v_BxGxCxK, allowed, carry)

        first, end = _key_range(blocks, i, shift)
        return jax.lax.fori_loop(first, end, key_block, carry)


class Partial(NamedTuple):
    """The online softmax of every query row so far: running maximum ``row_max`` and sum of
    exponentials ``row_sum`` (BxGxRxT), and the unnormalised output ``acc`` (BxGxRxTxK),
    float32."""

    row_max: jax.Array
    row_sum: jax.Array
    acc: jax.Array

    @classmethod
    def empty(cls, B: int, G: int, R: int, T: int, K: int) -> Partial:
        rows = (B, G, R, T)
        return cls(
            jnp.full(rows, NEG_INF, jnp.float32),
            jnp.zeros(rows, jnp.float32),
            jnp.zeros((*rows, K), jnp.float32),
        )


def accumulate(
    blocks: Blocks,
    running: Partial,
    q_BxGxRxTxK: jax.Array,
    k_BxGxSxK: jax.Array,
    v_BxGxSxK: jax.Array,
    q_seg_BxT: jax.Array,
    k_seg_BxS: jax.Array,
    shift: jax.Array | int = 0,
) -> Partial:
    """``running`` continued over these keys. T and S are whole blocks (``pad_axis`` with the
    ``PAD_Q``/``PAD_K`` segment ids), q is already scaled by 1 / sqrt(K)."""
    keys = _Keys(blocks, k_BxGxSxK, v_BxGxSxK, k_seg_BxS, jnp.asarray(shift, jnp.int32))

    def query_block(_, xs):
        i, q_BxGxRxQxK, q_seg_BxQ, m_BxGxRxQ, l_BxGxRxQ, acc_BxGxRxQxK = xs

        def key_block(j, k_BxGxCxK, v_BxGxCxK, allowed, carry):
            m_BxGxRxQ, l_BxGxRxQ, acc_BxGxRxQxK = carry
            s_BxGxRxQxC = jnp.where(allowed, _scores(q_BxGxRxQxK, k_BxGxCxK), NEG_INF)
            m_new = jnp.maximum(m_BxGxRxQ, s_BxGxRxQxC.max(-1))
            p_BxGxRxQxC = jnp.where(allowed, jnp.exp(s_BxGxRxQxC - m_new[..., None]), 0.0)
            rescale = jnp.exp(m_BxGxRxQ - m_new)
            l_new = l_BxGxRxQ * rescale + p_BxGxRxQxC.sum(-1)
            pv = jnp.einsum(
                "bgrqc,bgck->bgrqk",
                p_BxGxRxQxC.astype(v_BxGxCxK.dtype),
                v_BxGxCxK,
                preferred_element_type=jnp.float32,
            )
            return m_new, l_new, acc_BxGxRxQxK * rescale[..., None] + pv

        return None, keys.walk(i, q_seg_BxQ, key_block, (m_BxGxRxQ, l_BxGxRxQ, acc_BxGxRxQxK))

    xs = (
        jnp.arange(blocks.nq, dtype=jnp.int32),
        _query_blocks(q_BxGxRxTxK, blocks, 3),
        _query_blocks(q_seg_BxT, blocks, 1),
        *(_query_blocks(x, blocks, 3) for x in running),
    )
    _, blocked = jax.lax.scan(query_block, None, xs)
    return Partial(*(_unblock(x, 3) for x in blocked))


def finish(running: Partial, dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
    """Output BxGxRxTxK (in ``dtype``) and the per-row logsumexp BxGxRxT (+inf for rows that
    saw no key: their output is 0 and ``exp(s - lse)`` gives them no gradient)."""
    seen = running.row_sum > 0
    sum_safe = jnp.where(seen, running.row_sum, 1.0)
    out = running.acc / sum_safe[..., None]
    lse = jnp.where(seen, running.row_max + jnp.log(sum_safe), jnp.inf)
    return out.astype(dtype), lse


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(
    blocks: Blocks, q: jax.Array, k: jax.Array, v: jax.Array, q_seg: jax.Array, k_seg: jax.Array
) -> jax.Array:
    """Attention output BxGxRxTxK (shapes as ``_flash_fwd``'s, which computes it)."""
    return _flash_fwd(blocks, q, k, v, q_seg, k_seg)[0]


def _flash_fwd(
    blocks: Blocks, q: jax.Array, k: jax.Array, v: jax.Array, q_seg: jax.Array, k_seg: jax.Array
) -> tuple[jax.Array, tuple]:
    """The output BxGxRxTxK, and what the backward keeps: inputs, output and the per-row
    logsumexp BxGxRxT (+inf for rows that see nothing), all linear in T."""
    running = accumulate(blocks, Partial.empty(*q.shape), q, k, v, q_seg, k_seg)
    out, lse = finish(running, q.dtype)
    return out, (q, k, v, q_seg, k_seg, out, lse)


def row_dot(dout_BxGxRxTxK: jax.Array, out_BxGxRxTxK: jax.Array) -> jax.Array:
    """D = rowsum(dout * out), BxGxRxT in float32: the softmax backward's correction."""
    f32 = jnp.float32
    return jnp.sum(dout_BxGxRxTxK.astype(f32) * out_BxGxRxTxK.astype(f32), axis=-1)


def pair_gradients(
    blocks: Blocks,
    q_BxGxRxTxK: jax.Array,
    k_BxGxSxK: jax.Array,
    v_BxGxSxK: jax.Array,
    q_seg_BxT: jax.Array,
    k_seg_BxS: jax.Array,
    dout_BxGxRxTxK: jax.Array,
    lse_BxGxRxT: jax.Array,
    delta_BxGxRxT: jax.Array,
    shift: jax.Array | int = 0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(dq, dk, dv) in float32 of these queries against these keys, given the rows' final
    logsumexp ``lse`` and ``delta`` = ``row_dot(dout, out)`` over every key they saw.

    One pass over the query blocks; within each, over the key blocks it sees. With
    p = exp(s - lse) the block's probabilities: dv += p^T dout, dp = dout v^T,
    ds = p * (dp - delta), dq += ds k, dk += ds^T q. dq of a query block is finished in its
    own loop; dk and dv accumulate in the carry. Summed over every key set a row saw, these
    are the gradients of the whole attention (the softmax normaliser is ``lse``'s).
    """
    f32 = jnp.float32
    keys = _Keys(blocks, k_BxGxSxK, v_BxGxSxK, k_seg_BxS, jnp.asarray(shift, jnp.int32))

    def query_block(carry, xs):
        i, q_BxGxRxQxK, q_seg_BxQ, dout_BxGxRxQxK, lse_BxGxRxQ, delta_BxGxRxQ = xs

        def key_block(j, k_BxGxCxK, v_BxGxCxK, allowed, inner):
            dq_BxGxRxQxK, dk_BxGxSxK, dv_BxGxSxK = inner
            s_BxGxRxQxC = _scores(q_BxGxRxQxK, k_BxGxCxK)
            p_BxGxRxQxC = jnp.where(allowed, jnp.exp(s_BxGxRxQxC - lse_BxGxRxQ[..., None]), 0.0)
            dp_BxGxRxQxC = jnp.einsum(
                "bgrqk,bgck->bgrqc", dout_BxGxRxQxK, v_BxGxCxK, preferred_element_type=f32
            )
            ds_BxGxRxQxC = p_BxGxRxQxC * (dp_BxGxRxQxC - delta_BxGxRxQ[..., None])
            dv_BxGxCxK = jnp.einsum(
                "bgrqc,bgrqk->bgck",
                p_BxGxRxQxC.astype(dout_BxGxRxQxK.dtype),
                dout_BxGxRxQxK,
                preferred_element_type=f32,
            )
            dk_BxGxCxK = jnp.einsum(
                "bgrqc,bgrqk->bgck",
                ds_BxGxRxQxC.astype(q_BxGxRxQxK.dtype),
                q_BxGxRxQxK,
                preferred_element_type=f32,
            )
            dq_BxGxRxQxK += jnp.einsum(
                "bgrqc,bgck->bgrqk",
                ds_BxGxRxQxC.astype(k_BxGxCxK.dtype),
                k_BxGxCxK,
                preferred_element_type=f32,
            )
            dk_BxGxSxK = _add_block(dk_BxGxSxK, dk_BxGxCxK, j, blocks.k)
            dv_BxGxSxK = _add_block(dv_BxGxSxK, dv_BxGxCxK, j, blocks.k)
            return dq_BxGxRxQxK, dk_BxGxSxK, dv_BxGxSxK

        dq = jnp.zeros(q_BxGxRxQxK.shape, f32)
        dq, dk, dv = keys.walk(i, q_seg_BxQ, key_block, (dq, *carry))
        return (dk, dv), dq

    zeros = jnp.zeros(k_BxGxSxK.shape, f32)
    xs = (
        jnp.arange(blocks.nq, dtype=jnp.int32),
        _query_blocks(q_BxGxRxTxK, blocks, 3),
        _query_blocks(q_seg_BxT, blocks, 1),
        _query_blocks(dout_BxGxRxTxK, blocks, 3),
        _query_blocks(lse_BxGxRxT, blocks, 3),
        _query_blocks(delta_BxGxRxT, blocks, 3),
    )
    (dk, dv), dq = jax.lax.scan(query_block, (zeros, zeros), xs)
    return _unblock(dq, 3), dk, dv


def _flash_bwd(blocks: Blocks, residuals: tuple, dout_BxGxRxTxK: jax.Array) -> tuple:
    """The gradients of the one (queries, keys) pair: ``pair_gradients`` at shift 0."""
    q_BxGxRxTxK, k_BxGxSxK, v_BxGxSxK, q_seg_BxT, k_seg_BxS, out_BxGxRxTxK, lse_BxGxRxT = residuals
    delta_BxGxRxT = row_dot(dout_BxGxRxTxK, out_BxGxRxTxK)
    dq, dk, dv = pair_gradients(
        blocks,
        q_BxGxRxTxK,
        k_BxGxSxK,
        v_BxGxSxK,
        q_seg_BxT,
        k_seg_BxS,
        dout_BxGxRxTxK,
        lse_BxGxRxT,
        delta_BxGxRxT,
    )
    return (
        dq.astype(q_BxGxRxTxK.dtype),
        dk.astype(k_BxGxSxK.dtype),
        dv.astype(v_BxGxSxK.dtype),
        None,
        None,
    )


def _add_block(x: jax.Array, update: jax.Array, j: jax.Array, size: int) -> jax.Array:
    start = j * size
    current = jax.lax.dynamic_slice_in_dim(x, start, size, 2)
    return jax.lax.dynamic_update_slice_in_dim(x, current + update, start, 2)


_flash.defvjp(_flash_fwd, _flash_bwd)
