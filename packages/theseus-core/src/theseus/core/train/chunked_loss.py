"""Cross entropy with the output head run on a few positions at a time.

A step's float32 logits are rows x T x vocab: 2 GiB for 8 rows of 2,048 tokens over a
32,000-token vocabulary, and their gradient as much again, often more than all of a small
model's activations. Here the sequence is cut into ``chunks`` pieces; a scan runs the head and
the loss on one piece at a time under ``jax.checkpoint``, so only one piece's logits exist at
once, in the forward and in the backward (which recomputes them: one more head matmul, a few
percent of a step). The sum is the same as over the whole logits, up to float32 summation
order.

``loss_chunks`` chooses the count: the fewest that keep one piece's float32 logits under
``CHUNK_BYTES`` per device (1 when the whole already does), none when the sequence is split
over ``context`` devices (cutting it again would move it between them); or the count a run
gives (``training.loss_chunks``): fewer pieces run the head in larger matmuls and hold more
logits at once.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from theseus.core.train.configs import checked_chunks

CHUNK_BYTES = 256 * 1024**2  # one piece's float32 logits per device


def loss_chunks(
    rows: int,
    seq_len: int,
    vocab: int,
    context: int = 1,
    given: int = 0,
    length_name: str = "training.seq_len",
) -> int:
    """How many pieces of the sequence the loss takes one at a time (a divisor of
    ``seq_len``; 1: the whole at once); ``given`` (``training.loss_chunks``) when set,
    checked against ``seq_len`` under the name ``length_name``."""
    if given:
        return checked_chunks(given, seq_len, context, length_name)
    whole = rows * seq_len * vocab * 4
    if context > 1 or whole <= CHUNK_BYTES:
        return 1
    for chunks in range(2, seq_len + 1):
        if seq_len % chunks == 0 and whole / chunks <= CHUNK_BYTES:
            return chunks
    return seq_len


def chunked_cross_entropy(
    head: Callable[[jax.Array], jax.Array],
    hidden_BxTxD: jax.Array,
    targets_BxT: jax.Array,
    mask_BxT: jax.Array,
    chunks: int,
) -> jax.Array:
    """``sum(cross_entropy(head(hidden), targets) * mask)`` over ``chunks`` pieces of the
    sequence, one piece's logits in memory at a time."""
    B, T, D = hidden_BxTxD.shape
    C = T // chunks

    def pieces(x: jax.Array) -> jax.Array:  # BxTx... -> chunks x B x C x ...
        return jnp.swapaxes(x.reshape(B, chunks, C, *x.shape[2:]), 0, 1)

    @jax.checkpoint
    def piece_loss(h_BxCxD: jax.Array, t_BxC: jax.Array, m_BxC: jax.Array) -> jax.Array:
        logits_BxCxV = head(h_BxCxD).astype(jnp.float32)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits_BxCxV, t_BxC)
        return jnp.sum(losses * m_BxC)

    def add(total: jax.Array, piece: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
        return total + piece_loss(*piece), None

    mask = mask_BxT.astype(jnp.float32)
    inputs = (pieces(hidden_BxTxD), pieces(targets_BxT), pieces(mask))
    total, _ = jax.lax.scan(add, zero_like(mask), inputs)
    return _loss_first(total)


def zero_like(x: jax.Array) -> jax.Array:
    """A float32 zero varying over the manual mesh axes ``x`` varies over (inside a
    ``shard_map``: the scan's sum starts as its pieces are)."""
    zero = jnp.zeros((), jnp.float32)
    varying = tuple(sorted(jax.typeof(x).mat.varying))
    return jax.lax.pcast(zero, varying, to="varying") if varying else zero


@jax.custom_vjp
def _loss_first(total: jax.Array) -> jax.Array:
    """``total`` as it is; its gradient waits for it.

    Under ``jax.grad`` the forward scan above only yields the loss (its pieces are
    recomputed by the backward scan), so nothing orders it before the rest of the
    backward pass: XLA:TPU scheduled it after the layers' backward loop, keeping the
    gathered head table (bf16 embed x vocab: 2.0 GiB for Llama 3.1 70B) and the hidden
    states alive through that loop. Tying the cotangent to the loss makes the backward
    scan (and so everything after it) start after the forward one."""
    return total


def _loss_first_fwd(total: jax.Array) -> tuple[jax.Array, jax.Array]:
    return total, total


def _loss_first_bwd(total: jax.Array, g: jax.Array) -> tuple[jax.Array]:
    g, _ = jax.lax.optimization_barrier((g, total))
    return (g,)


_loss_first.defvjp(_loss_first_fwd, _loss_first_bwd)
