"""The reference the compiled decoding loop is checked against: a host loop that steps the
model one token at a time (one jitted call per token through ``model.decode``, the token
drawn on the host's side of the loop), as generation ran before it was compiled."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.models.generate import left_pad, trimmed
from theseus.models.sampling import sample, sample_rows, token_logprob


@partial(jax.jit, static_argnums=(0,))
def _decode(graphdef, state, tokens, positions, segments, cache):
    logits, cache = nnx.merge(graphdef, state).decode(
        tokens, cache, positions=positions, segment_ids=segments
    )
    return logits[:, -1], cache


@partial(jax.jit, static_argnums=(3,))
def _draw(logits, keys, t, how):
    return sample_rows(logits, keys, t, how)


@partial(jax.jit, static_argnums=(2,))
def _draw_batch(logits, key, how):
    return sample(logits, key, how.temperature, how.top_k, how.top_p)


def stepwise(model, prompts, *, max_new_tokens, how, seeds=None, seed=0, stops=()):
    """(tokens, log-probs) of each prompt, trimmed after its first stop token."""
    graphdef, state = nnx.split(model)
    tokens, segments, positions = left_pad(prompts)
    B, P = tokens.shape
    cache = model.init_cache(B, P + max_new_tokens)
    logits, cache = _decode(graphdef, state, tokens, positions, segments, cache)
    keys = None if seeds is None else jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    key = jax.random.key(seed)
    out = np.zeros((B, max_new_tokens), np.int32)
    logps = np.zeros((B, max_new_tokens), np.float32)
    done = np.zeros(B, bool)
    for t in range(max_new_tokens):
        if keys is not None:
            token = np.asarray(_draw(logits, keys, t, how))
        else:
            key, sub = jax.random.split(key)
            token = np.asarray(_draw_batch(logits, sub, how))
        logps[:, t] = np.asarray(token_logprob(logits, jnp.asarray(token), how.temperature))
        token = np.where(done, 0, token)
        out[:, t] = token
        done |= np.isin(token, list(stops))
        if done.all():
            break
        where = jnp.asarray(positions[:, -1] + 1 + t)[:, None]
        ones = jnp.ones((B, 1), jnp.int32)
        logits, cache = _decode(graphdef, state, jnp.asarray(token)[:, None], where, ones, cache)
    return trimmed(out, logps, stops)
