"""KV-cache generation: one prefill over the (left-padded) prompts, then one token per step.

Greedy when ``temperature == 0``; otherwise temperature, top-k and top-p sampling from a
seeded key (reproducible), or with ``seeds`` from one key per row, so that a row's tokens do
not depend on the rest of the batch. A row stops at its first stop token (kept in its output).

A model without a KV cache (only core's ``LanguageModel`` protocol, e.g. a third-party
family) generates too: each step runs the full forward over a fixed-length buffer (one
compilation; causal attention keeps the not-yet-written tail from mattering). Slower, the
same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.models.errors import ModelError, VocabMismatchError
from theseus.models.layers.attention import KVCache


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


@partial(jax.jit, static_argnums=(0,))
def _prefill(graphdef, state, tokens, positions, segments, cache):
    model = nnx.merge(graphdef, state)
    logits, cache = model.decode(tokens, cache, positions=positions, segment_ids=segments)
    return logits[:, -1], cache


@partial(jax.jit, static_argnums=(0,))
def _step(graphdef, state, token_B, position_B, cache):
    model = nnx.merge(graphdef, state)
    logits, cache = model.decode(
        token_B[:, None],
        cache,
        positions=position_B[:, None],
        segment_ids=jnp.ones_like(token_B)[:, None],
    )
    return logits[:, -1], cache


@partial(jax.jit, static_argnums=(0,))
def _forward_at(graphdef, state, tokens, positions, segments, index):
    model = nnx.merge(graphdef, state)
    logits = model(tokens, positions=positions, segment_ids=segments)
    return jax.lax.dynamic_index_in_dim(logits, index, axis=1, keepdims=False)


@partial(jax.jit, static_argnums=(2, 3, 4))
def _sample(logits, key, temperature, top_k, top_p):
    return sample(logits, key, temperature, top_k, top_p)


@partial(jax.jit, static_argnums=(3, 4, 5))
def _sample_rows(logits_BxV, keys_B, t, temperature, top_k, top_p):
    """Row b's token drawn from key ``fold_in(keys_B[b], t)`` alone."""

    def one(logits_V, key):
        return sample(logits_V[None], jax.random.fold_in(key, t), temperature, top_k, top_p)[0]

    return jax.vmap(one)(logits_BxV, keys_B)


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, segment ids (1 real, 0 pad) and positions of left-padded prompts (B x P)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ModelError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    tokens = np.full((len(prompts), width), pad_id, np.int32)
    segments = np.zeros((len(prompts), width), np.int32)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt) :] = prompt
        segments[row, width - len(prompt) :] = 1
    positions = np.maximum(np.cumsum(segments, axis=1) - 1, 0).astype(np.int32)
    return tokens, segments, positions


@partial(jax.jit, static_argnums=(2,))
def _token_logprob(logits_BxV, token_B, temperature):
    """log softmax(logits / temperature)[token] per row (temperature 0 scores at 1)."""
    logits = logits_BxV.astype(jnp.float32) / (temperature if temperature > 0 else 1.0)
    picked = jnp.take_along_axis(logits, token_B[:, None], axis=-1)[:, 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def generate(
    model: nnx.Module, prompts: Sequence[Sequence[int]], **options: Any
) -> list[list[int]]:
    """New token ids for each prompt (up to ``max_new_tokens``, ending at a stop token);
    the options are those of :func:`generate_with_logprobs`."""
    return generate_with_logprobs(model, prompts, **options)[0]


def generate_with_logprobs(
    model: nnx.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    stop_tokens: Sequence[int] = (),
    pad_id: int = 0,
    seeds: Sequence[int] | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """New token ids for each prompt (up to ``max_new_tokens``, ending at a stop token), and
    the log-probability of each under softmax(logits / temperature) as the decoder computed
    it (before top-k/top-p filtering: the distribution a trainer scores).

    ``seeds`` (one per prompt) replaces ``seed``: row i samples from keys of ``seeds[i]``."""
    vocab = model.config.vocab_size
    for prompt in prompts:
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise VocabMismatchError(
                f"prompt token id {bad[0]} is outside the model's vocab_size={vocab}"
            )
    tokens, segments, positions = left_pad(prompts, pad_id)
    B, P = tokens.shape
    length = P + max_new_tokens
    if length > model.config.max_seq_len:
        raise ModelError(
            f"prompt of {P} tokens + max_new_tokens={max_new_tokens} = {length} exceeds the "
            f"model's max_seq_len={model.config.max_seq_len}"
        )
    if hasattr(model, "init_cache") and hasattr(model, "decode"):
        advance = _with_cache(model, tokens, positions, segments, length)
    else:
        advance = _without_cache(model, tokens, positions, segments, length, pad_id)
    logits = advance(None, 0)
    key = jax.random.key(seed)
    if seeds is not None and len(seeds) != B:
        raise ModelError(f"{len(seeds)} seeds for {B} prompts: give one seed per prompt")
    row_keys = None if seeds is None else jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    stops = np.asarray(sorted(set(stop_tokens)), np.int32)
    stop_set = set(stops.tolist())
    out = np.zeros((B, max_new_tokens), np.int32)
    out_logp = np.zeros((B, max_new_tokens), np.float32)
    done = np.zeros((B,), bool)
    for t in range(max_new_tokens):
        sampling = float(temperature), int(top_k), float(top_p)
        if row_keys is not None:
            token = np.asarray(_sample_rows(logits, row_keys, t, *sampling))
        else:
            key, sub = jax.random.split(key)
            token = np.asarray(_sample(logits, sub, *sampling))
        out_logp[:, t] = np.asarray(_token_logprob(logits, jnp.asarray(token), float(temperature)))
        token = np.where(done, pad_id, token)
        out[:, t] = token
        done |= np.isin(token, stops)
        if done.all() or t == max_new_tokens - 1:
            break
        logits = advance(token, t)
    results, logprobs = [], []
    for row in range(B):
        ids = out[row].tolist()
        hit = [i for i, tok in enumerate(ids) if tok in stop_set]
        n = hit[0] + 1 if hit else len(ids)
        results.append(ids[:n])
        logprobs.append(out_logp[row, :n].tolist())
    return results, logprobs


def _with_cache(model, tokens, positions, segments, length):
    """``advance(token, t)``: the next logits (prefill when ``token`` is None) from the cache."""
    graphdef, state = nnx.split(model)
    cache: list[KVCache] = [model.init_cache(tokens.shape[0], length)]
    next_pos = jnp.asarray(positions[:, -1] + 1)

    def advance(token, t):
        if token is None:
            logits, cache[0] = _prefill(
                graphdef,
                state,
                jnp.asarray(tokens),
                jnp.asarray(positions),
                jnp.asarray(segments),
                cache[0],
            )
        else:
            logits, cache[0] = _step(graphdef, state, jnp.asarray(token), next_pos + t, cache[0])
        return logits

    return advance


def _without_cache(model, tokens, positions, segments, length, pad_id):
    """``advance(token, t)``: the next logits by a full forward over a B x length buffer."""
    graphdef, state = nnx.split(model)
    B, P = tokens.shape
    buffer = np.full((B, length), pad_id, np.int32)
    buffer[:, :P] = tokens
    all_segments = np.ones((B, length), np.int32)
    all_segments[:, :P] = segments
    all_positions = np.zeros((B, length), np.int32)
    all_positions[:, :P] = positions
    all_positions[:, P:] = positions[:, -1:] + 1 + np.arange(length - P)[None]
    fixed = jnp.asarray(all_positions), jnp.asarray(all_segments)

    def advance(token, t):
        if token is not None:
            buffer[:, P + t] = token
            index = P + t
        else:
            index = P - 1
        return _forward_at(graphdef, state, jnp.asarray(buffer), *fixed, index)

    return advance
