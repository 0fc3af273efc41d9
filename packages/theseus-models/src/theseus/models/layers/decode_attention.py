"""One decoding step's attention over the KV cache, reading only the positions written so far.

While a batch decodes, every row has the same fill index (the prompts are left-padded to one
width), so the keys a new token can see are slots ``0 .. end - 1`` of its layer's cache
(``end`` = the fill index after the token's own key was written), further limited by its
segment (padding has its own) and a sliding window. The cache is allocated for the whole
generation; a step that attended over all of it would read the unwritten tail too (on
average half of it). :func:`decode_attention` reads the written part only:

* on a TPU, a Pallas kernel over the layer-stacked cache (``LxBxGxSxK``): the layer and the
  fill index are prefetched scalars, so the kernel's blocks of keys and values come straight
  from the cache with no slice copied out of it. Its grid walks blocks of ``block`` slots;
  the block index stops advancing at the last written block (the pipeline then fetches
  nothing more) and those steps compute nothing. Online softmax in float32 across blocks,
  as flash attention does.
* elsewhere, the same mask over the layer's whole cache in plain JAX (the reference stages'
  math), which a CPU reads at its own pace.

Shapes: B rows, H query heads in G groups of R (query head h = g * R + r), K head_dim,
L layers, S cache slots.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

NEG_INF = -1e30
LANES = 128  # a TPU vector register's lanes: the running max and sum are kept this wide
SUBLANES = 8  # the grouped query heads are padded to a whole number of these
KERNEL_SLOTS = 128  # a cache the kernel reads has a whole number of these slots

#: how a decoding step reads its cache: ``reference`` (plain JAX over the whole layer),
#: ``pallas`` (the kernel; TPU), ``pallas_interpret`` (the kernel in Pallas' interpreter)
READERS = ("reference", "pallas", "pallas_interpret")


def cache_block(slots: int, rows: int, head_dim: int, itemsize: int) -> int:
    """Slots per kernel block: the largest of 512, 256, 128 dividing ``slots`` whose key and
    value blocks (double-buffered) for ``rows`` rows stay within 16 MiB of VMEM."""
    for block in (512, 256, 128):
        fits = rows * block * head_dim * itemsize * 4 <= 16 * 1024**2
        if slots % block == 0 and fits:
            return block
    raise ValueError(f"a cache of {slots} slots is not a multiple of 128 (pad its length)")


def row_block(rows: int) -> int:
    """Rows per kernel block: 8 when they divide, else all of them."""
    return SUBLANES if rows % SUBLANES == 0 else rows


def decode_attention_reference(
    q_BxHxK: jax.Array,
    k_LxBxGxSxK: jax.Array,
    v_LxBxGxSxK: jax.Array,
    layer: jax.Array | int,
    end: jax.Array,
    k_segment_BxS: jax.Array,
    q_segment_B: jax.Array,
    *,
    window: int = 0,
    scale: float,
) -> jax.Array:
    """The kernel's result in plain JAX (over the layer's whole cache), BxHxK."""
    B, H, K = q_BxHxK.shape
    k_BxGxSxK = jax.lax.dynamic_index_in_dim(k_LxBxGxSxK, layer, keepdims=False)
    v_BxGxSxK = jax.lax.dynamic_index_in_dim(v_LxBxGxSxK, layer, keepdims=False)
    G, S = k_BxGxSxK.shape[1], k_BxGxSxK.shape[2]
    q_BxGxRxK = (q_BxHxK * scale).reshape(B, G, H // G, K).astype(k_BxGxSxK.dtype)
    s = jnp.einsum("bgrk,bgsk->bgrs", q_BxGxRxK, k_BxGxSxK, preferred_element_type=jnp.float32)
    visible_BxS = _visible(jnp.arange(S, dtype=jnp.int32)[None], end, window)
    visible_BxS &= k_segment_BxS == q_segment_B[:, None]
    s = jnp.where(visible_BxS[:, None, None], s, NEG_INF)
    p = jax.nn.softmax(s, axis=-1).astype(v_BxGxSxK.dtype)
    out = jnp.einsum("bgrs,bgsk->bgrk", p, v_BxGxSxK, preferred_element_type=jnp.float32)
    return out.reshape(B, H, -1).astype(q_BxHxK.dtype)


def _visible(slot: jax.Array, end: jax.Array, window: int) -> jax.Array:
    """Slots a query at ``end - 1`` sees: written ones, within its window."""
    visible = slot < end
    if window:
        visible &= slot >= end - window
    return visible


def decode_attention(
    q_BxHxK: jax.Array,
    k_LxBxGxSxK: jax.Array,
    v_LxBxGxSxK: jax.Array,
    layer: jax.Array | int,
    end: jax.Array,
    k_segment_BxS: jax.Array,
    q_segment_B: jax.Array,
    *,
    window: int = 0,
    scale: float,
    interpret: bool = False,
) -> jax.Array:
    """softmax(scale q k^T + mask) v of one new token per row against its layer's cache,
    reading slots below ``end`` only (the Pallas kernel), BxHxK."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    B, H, K = q_BxHxK.shape
    L, _, G, S, V = v_LxBxGxSxK.shape
    R = H // G
    padded = -(-R // SUBLANES) * SUBLANES  # query heads of a group, padded for the MXU
    q = (q_BxHxK * scale).reshape(B, G, R, K).astype(k_LxBxGxSxK.dtype)
    q = jnp.pad(q, ((0, 0), (0, 0), (0, padded - R), (0, 0)))
    rows = row_block(B)
    block = cache_block(S, rows, max(K, V), jnp.dtype(k_LxBxGxSxK.dtype).itemsize)
    meta = jnp.stack([jnp.asarray(layer, jnp.int32), jnp.asarray(end, jnp.int32)])

    def cache_index(b, g, j, meta_ref):
        return (meta_ref[0], b, g, _live_block(j, meta_ref[1], block, window), 0)

    def segment_index(b, g, j, meta_ref):
        return (b, _live_block(j, meta_ref[1], block, window))

    def per_row(b, g, j, meta_ref):
        return (b, g, 0, 0)

    squeezed = pl.squeezed
    kernel = partial(_kernel, block=block, rows=rows, window=window)
    out = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(B // rows, G, S // block),
            in_specs=[
                pl.BlockSpec((rows, squeezed, padded, K), per_row),
                pl.BlockSpec((squeezed, rows, squeezed, block, K), cache_index),
                pl.BlockSpec((squeezed, rows, squeezed, block, V), cache_index),
                pl.BlockSpec((rows, block), segment_index),
                pl.BlockSpec((rows, 1), lambda b, g, j, meta_ref: (b, 0)),
            ],
            out_specs=pl.BlockSpec((rows, squeezed, padded, V), per_row),
            scratch_shapes=[
                pltpu.VMEM((rows, padded, LANES), jnp.float32),  # running max
                pltpu.VMEM((rows, padded, LANES), jnp.float32),  # running sum
                pltpu.VMEM((rows, padded, V), jnp.float32),  # running output
            ],
        ),
        out_shape=jax.ShapeDtypeStruct((B, G, padded, V), q_BxHxK.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=interpret,
    )(
        meta,
        q,
        k_LxBxGxSxK,
        v_LxBxGxSxK,
        k_segment_BxS.astype(jnp.int32),
        q_segment_B.astype(jnp.int32)[:, None],
    )
    return out[:, :, :R].reshape(B, H, V)


def _live_block(j: jax.Array, end: jax.Array, block: int, window: int) -> jax.Array:
    """Block ``j`` clamped to the blocks holding visible slots: past them the index stops
    moving, so the pipeline fetches nothing new."""
    last = (end - 1) // block
    first = jnp.maximum(end - window, 0) // block if window else 0
    return jnp.clip(j, first, last)


def _kernel(
    meta_ref, q_ref, k_ref, v_ref, k_segment_ref, q_segment_ref, o_ref, m_ref, l_ref, acc_ref,
    *, block: int, rows: int, window: int,
):  # fmt: skip
    from jax.experimental import pallas as pl

    j = pl.program_id(2)
    end = meta_ref[1]
    start = j * block

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    first = end - window if window else 0
    live = (start < end) & (start + block > first)

    @pl.when(live)
    def _attend():
        slot = start + jax.lax.broadcasted_iota(jnp.int32, (1, block), 1)
        visible = _visible(slot, end, window)
        for r in range(rows):
            ok = visible & (k_segment_ref[r : r + 1, :] == q_segment_ref[r : r + 1, :])
            s = jax.lax.dot_general(
                q_ref[r], k_ref[r], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
            )  # R' x block
            s = jnp.where(ok, s, NEG_INF)
            m_prev = m_ref[r]
            m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
            alpha = jnp.exp(m_prev - m_next)
            p = jnp.where(ok, jnp.exp(s - m_next[:, :1]), 0.0)
            l_ref[r] = alpha * l_ref[r] + jnp.sum(p, axis=1, keepdims=True)
            m_ref[r] = m_next
            pv = jax.lax.dot_general(
                p.astype(v_ref.dtype),
                v_ref[r],
                (((1,), (0,)), ((), ())),
                preferred_element_type=jnp.float32,
            )  # R' x V
            acc_ref[r] = alpha[:, :1] * acc_ref[r] + pv

    @pl.when(j == pl.num_programs(2) - 1)
    def _finish():
        for r in range(rows):
            total = l_ref[r][:, :1]
            o_ref[r] = (acc_ref[r] / jnp.where(total > 0, total, 1.0)).astype(o_ref.dtype)
