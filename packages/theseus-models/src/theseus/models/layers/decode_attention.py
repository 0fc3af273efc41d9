"""One decoding step's attention over the KV cache, reading only the positions written so far.

The cache keeps each position's keys of every kv head side by side (``LxBxSx(G*K)``): a
head_dim of 64 would otherwise be stored padded to a TPU's 128 lanes, twice the bytes to
hold and to read. While a batch decodes, every row has the same fill index (the prompts
are left-padded to one width), so the keys a new token can see are the slots from its row's
first real one (``first``) to ``end - 1`` (``end`` = the fill index after the token's own
key was written), within a sliding window when there is one. A step that attended over the
whole cache would read the unwritten tail too (on average half of it).
:func:`decode_attention` reads the written part only:

* on a TPU, a Pallas kernel over the layer-stacked cache: the layer, the fill index and each
  row's first slot are prefetched scalars, so the kernel's blocks of keys and values come
  straight from the cache, no slice of it copied out. Its grid walks blocks of ``block``
  slots; the block index stops advancing at the last written block (the pipeline then
  fetches nothing more) and those steps compute nothing. Online softmax in float32 across
  blocks, as flash attention does.
* elsewhere, the same mask over the layer's whole cache in plain JAX (the reference stages'
  math), which a CPU reads at its own pace.

Shapes: B rows, H query heads in G groups of R (query head h = g * R + r), K head_dim (V for
values), L layers, S cache slots.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

NEG_INF = -1e30
LANES = 128  # a TPU vector register's lanes: the running max and sum are kept this wide
SUBLANES = 8  # the grouped query heads are padded to a whole number of these
KERNEL_SLOTS = 128  # a cache the kernel reads has a whole number of these slots
KERNEL_NAME = "decode_attention"  # the custom call's name in a compiled program
VMEM_BLOCKS = 24 * 1024**2  # the key and value blocks in flight (double-buffered)

#: how a decoding step reads its cache: ``reference`` (plain JAX over the whole layer),
#: ``pallas`` (the kernel; TPU), ``pallas_interpret`` (the kernel in Pallas' interpreter)
READERS = ("reference", "pallas", "pallas_interpret")


def cache_block(slots: int, rows: int, lanes: int, itemsize: int) -> int:
    """Slots per kernel block: the largest of 512, 256, 128 dividing ``slots`` whose key and
    value blocks (``lanes`` wide together, double-buffered) for ``rows`` rows fit
    ``VMEM_BLOCKS``."""
    for block in (512, 256, 128):
        if slots % block == 0 and rows * block * lanes * itemsize * 2 <= VMEM_BLOCKS:
            return block
    if slots % KERNEL_SLOTS:
        raise ValueError(f"a cache of {slots} slots is not a multiple of {KERNEL_SLOTS}")
    return KERNEL_SLOTS


def row_block(rows: int) -> int:
    """Rows per kernel block: 8 when they divide, else all of them."""
    return SUBLANES if rows % SUBLANES == 0 else rows


def first_slots(k_segment_BxS: jax.Array) -> jax.Array:
    """Each row's first real slot (its left padding's length), B int32."""
    return jnp.argmax(k_segment_BxS > 0, axis=1).astype(jnp.int32)


def decode_attention_reference(
    q_BxHxK: jax.Array,
    k_LxBxSxW: jax.Array,
    v_LxBxSxW: jax.Array,
    layer: jax.Array | int,
    end: jax.Array,
    first_B: jax.Array,
    *,
    window: int = 0,
    scale: float,
) -> jax.Array:
    """The kernel's result in plain JAX (over the layer's whole cache), BxHxV."""
    B, H, K = q_BxHxK.shape
    k_BxSxW = jax.lax.dynamic_index_in_dim(k_LxBxSxW, layer, keepdims=False)
    v_BxSxW = jax.lax.dynamic_index_in_dim(v_LxBxSxW, layer, keepdims=False)
    S = k_BxSxW.shape[1]
    G = k_BxSxW.shape[2] // K
    k_BxSxGxK = k_BxSxW.reshape(B, S, G, K)
    v_BxSxGxV = v_BxSxW.reshape(B, S, G, -1)
    q_BxGxRxK = (q_BxHxK * scale).reshape(B, G, H // G, K).astype(k_BxSxW.dtype)
    s = jnp.einsum("bgrk,bsgk->bgrs", q_BxGxRxK, k_BxSxGxK, preferred_element_type=jnp.float32)
    slot = jnp.arange(S, dtype=jnp.int32)[None]
    visible_BxS = _visible(slot, end, window) & (slot >= first_B[:, None])
    s = jnp.where(visible_BxS[:, None, None], s, NEG_INF)
    p = jax.nn.softmax(s, axis=-1).astype(v_BxSxW.dtype)
    out = jnp.einsum("bgrs,bsgk->bgrk", p, v_BxSxGxV, preferred_element_type=jnp.float32)
    return out.reshape(B, H, -1).astype(q_BxHxK.dtype)


def _visible(slot: jax.Array, end: jax.Array, window: int) -> jax.Array:
    """Slots a query at ``end - 1`` sees: written ones, within its window."""
    visible = slot < end
    if window:
        visible &= slot >= end - window
    return visible


def decode_attention(
    q_BxHxK: jax.Array,
    k_LxBxSxW: jax.Array,
    v_LxBxSxW: jax.Array,
    layer: jax.Array | int,
    end: jax.Array,
    first_B: jax.Array,
    *,
    window: int = 0,
    scale: float,
    interpret: bool = False,
) -> jax.Array:
    """softmax(scale q k^T + mask) v of one new token per row against its layer's cache,
    reading the slots from each row's ``first`` up to ``end`` only (the Pallas kernel),
    BxHxV.

    Every query head of a row is scored in one product: the queries are laid out block-
    diagonally (query head h's K values in the K lanes of its kv head, zeros elsewhere), so
    ``q_bd @ k^T`` gives each head its own scores against the side-by-side keys, and
    ``p @ v`` gives each head its values in its kv head's lanes (the other lanes, products
    with other heads' values, are dropped). One product per row and block instead of one per
    head: fewer, larger matrix products, whose tiles are full even where K is 64."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    B, H, K = q_BxHxK.shape
    L, _, S, W = k_LxBxSxW.shape
    G = W // K
    Wv = v_LxBxSxW.shape[3]
    V = Wv // G
    padded = -(-H // SUBLANES) * SUBLANES
    group_of = jnp.arange(H) // (H // G)  # query head h reads kv head h // R
    owns = (group_of[:, None] == jnp.arange(G)[None, :]).astype(k_LxBxSxW.dtype)  # H x G
    q = (q_BxHxK * scale).astype(k_LxBxSxW.dtype)
    q_bd = (q[:, :, None, :] * owns[None, :, :, None]).reshape(B, H, W)
    q_bd = jnp.pad(q_bd, ((0, 0), (0, padded - H), (0, 0)))
    rows = row_block(B)
    block = cache_block(S, rows, W + Wv, jnp.dtype(k_LxBxSxW.dtype).itemsize)
    scalars = jnp.concatenate(
        [jnp.stack([jnp.asarray(layer, jnp.int32), jnp.asarray(end, jnp.int32)]), first_B]
    )

    def cache_index(b, j, scalars_ref):
        return (scalars_ref[0], b, _live_block(j, scalars_ref[1], block, window), 0)

    def per_row(b, j, scalars_ref):
        return (b, 0, 0)

    squeezed = pl.squeezed
    kernel = partial(_kernel, block=block, rows=rows, window=window)
    out = pl.pallas_call(
        kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(B // rows, S // block),
            in_specs=[
                pl.BlockSpec((rows, padded, W), per_row),
                pl.BlockSpec((squeezed, rows, block, W), cache_index),
                pl.BlockSpec((squeezed, rows, block, Wv), cache_index),
            ],
            out_specs=pl.BlockSpec((rows, padded, Wv), per_row),
            scratch_shapes=[
                pltpu.VMEM((rows, padded, LANES), jnp.float32),  # running max
                pltpu.VMEM((rows, padded, LANES), jnp.float32),  # running sum
                pltpu.VMEM((rows, padded, Wv), jnp.float32),  # running output
            ],
        ),
        out_shape=jax.ShapeDtypeStruct((B, padded, Wv), q_BxHxK.dtype),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary"), vmem_limit_bytes=2 * VMEM_BLOCKS
        ),
        interpret=interpret,
        name=KERNEL_NAME,
    )(scalars, q_bd, k_LxBxSxW, v_LxBxSxW)
    heads = out[:, :H].reshape(B, H, G, V)  # each head's values in its kv head's lanes
    return jnp.take_along_axis(heads, group_of[None, :, None, None], axis=2)[:, :, 0]


def _live_block(j: jax.Array, end: jax.Array, block: int, window: int) -> jax.Array:
    """Block ``j`` clamped to the blocks holding visible slots: past them the index stops
    moving, so the pipeline fetches nothing new."""
    last = (end - 1) // block
    first = jnp.maximum(end - window, 0) // block if window else 0
    return jnp.clip(j, first, last)


def _kernel(
    scalars_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref,
    *, block: int, rows: int, window: int,
):  # fmt: skip
    from jax.experimental import pallas as pl

    row_block_index, j = pl.program_id(0), pl.program_id(1)
    end = scalars_ref[1]
    start = j * block

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    lowest = end - window if window else 0
    live = (start < end) & (start + block > lowest)

    @pl.when(live)
    def _attend():
        slot = start + jax.lax.broadcasted_iota(jnp.int32, (1, block), 1)
        visible = _visible(slot, end, window)
        for r in range(rows):  # unrolled: the rows' chains are independent
            ok = visible & (slot >= scalars_ref[2 + row_block_index * rows + r])
            s = jax.lax.dot_general(
                q_ref[r], k_ref[r], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
            )  # H' x block: every query head against the keys of its own kv head
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
            )  # H' x (G * V)
            acc_ref[r] = alpha[:, :1] * acc_ref[r] + pv

    @pl.when(j == pl.num_programs(1) - 1)
    def _finish():
        total = l_ref[...][..., :1]
        o_ref[...] = (acc_ref[...] / jnp.where(total > 0, total, 1.0)).astype(o_ref.dtype)
