"""Drawing the next token from logits, and scoring it: greedy, temperature, top-k, top-p.

Greedy when ``temperature == 0``; otherwise a categorical draw from the filtered,
temperature-scaled softmax. The log-probability a decoder reports for a token is that of
softmax(logits / temperature) before the filters (the distribution a trainer scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn (hashable: a static argument of the compiled loop)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0


def sample(
    logits_BxV: jax.Array, key: jax.Array, temperature: float, top_k: int, top_p: float
) -> jax.Array:
    """The next token of each row: argmax at temperature 0, else a filtered softmax sample."""
    logits = logits_BxV.astype(jnp.float32)
    if temperature <= 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / temperature
    if top_k > 0:
        kth = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        sorted_desc = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_desc, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of the strictly more likely tokens
        cutoff = jnp.min(jnp.where(before < top_p, sorted_desc, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def sample_rows(logits_BxV: jax.Array, keys_B: jax.Array, t: jax.Array, how: Sampling) -> jax.Array:
    """Row b's token drawn from key ``fold_in(keys_B[b], t)`` alone: a row's tokens depend on
    its own key, not on the rest of the batch."""

    def one(logits_V: jax.Array, key: jax.Array) -> jax.Array:
        key = jax.random.fold_in(key, t)
        return sample(logits_V[None], key, how.temperature, how.top_k, how.top_p)[0]

    return jax.vmap(one)(logits_BxV, keys_B)


def token_logprob(logits_BxV: jax.Array, token_B: jax.Array, temperature: float) -> jax.Array:
    """log softmax(logits / temperature)[token] per row (temperature 0 scores at 1)."""
    logits = logits_BxV.astype(jnp.float32) / (temperature if temperature > 0 else 1.0)
    picked = jnp.take_along_axis(logits, token_B[:, None], axis=-1)[:, 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)
