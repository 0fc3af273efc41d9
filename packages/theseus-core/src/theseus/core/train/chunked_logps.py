"""Token log-probabilities with the output head run on a few positions at a time.

What ``chunked_loss`` does for the cross entropy, for the objectives that score tokens one
by one (GRPO's clipped ratio, DPO's sequence sums, their references): the hidden states
are cut into ``chunks`` pieces along the sequence and a scan runs the head on one piece at
a time under ``jax.checkpoint``, so a piece's float32 logits exist only while it is scored,
in the forward and in the backward pass (which computes them again). Out come the
log-probability of each target under softmax(logits / temperature) and, without gradient,
the entropy of that distribution: ``[B, T]`` arrays instead of ``[B, T, V]`` logits. The
values are those of the whole logits, up to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def chunked_token_stats(
    head: Callable[[jax.Array], jax.Array],
    hidden_BxTxD: jax.Array,
    targets_BxT: jax.Array,
    temperature: float,
    chunks: int,
) -> tuple[jax.Array, jax.Array]:
    """(log π(target), entropy of π) per position, float32 ``[B, T]`` each, π the softmax of
    ``head(hidden) / temperature``; ``chunks`` must divide T."""
    B, T, D = hidden_BxTxD.shape
    C = T // chunks
    targets = jnp.maximum(targets_BxT, 0)  # padding may hold -100

    def pieces(x: jax.Array) -> jax.Array:  # BxTx... -> chunks x B x C x ...
        return jnp.swapaxes(x.reshape(B, chunks, C, *x.shape[2:]), 0, 1)

    @jax.checkpoint
    def piece(h_BxCxD: jax.Array, t_BxC: jax.Array) -> tuple[jax.Array, jax.Array]:
        z = head(h_BxCxD).astype(jnp.float32) / temperature
        normalizer = jax.nn.logsumexp(z, axis=-1)
        picked = jnp.take_along_axis(z, t_BxC[..., None], axis=-1)[..., 0]
        entropy = normalizer - jnp.sum(jax.nn.softmax(z, axis=-1) * z, axis=-1)
        return picked - normalizer, jax.lax.stop_gradient(entropy)

    logps, entropies = jax.lax.map(
        lambda args: piece(*args), (pieces(hidden_BxTxD), pieces(targets))
    )

    def whole(x: jax.Array) -> jax.Array:  # chunks x B x C -> B x T
        return jnp.swapaxes(x, 0, 1).reshape(B, T)

    return whole(logps), whole(entropies)
