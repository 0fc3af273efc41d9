"""The compiled decoding loop: one program from the prompts to the last token.

:func:`decode_loop` prefills the (left-padded) prompts, then runs a ``lax.while_loop`` over
new tokens: each turn draws a token per row (sampling and its log-probability inside the
program), writes it, and runs one decoding step of the model, until every row has met a stop
token or ``max_new_tokens`` are drawn. Nothing returns to the host in between.

What makes each turn cost what the chip must read and no more:

* the KV cache lives in the loop's state, created inside the program (nothing to donate)
  and written one slot per layer in place (``layers/kv_cache.py``);
* a turn's attention reads the slots written so far, not the whole cache
  (``layers/decode_attention.py``: a Pallas kernel on a TPU);
* the weights are cast to their compute dtype once, before the loop
  (``layers/compute_weights.py``), so each turn reads bfloat16 matrices, not float32 ones;
* the prefill runs the attention kernel the model's plan names for training (splash on a
  TPU) over the prompts.

A model without a KV cache (only core's ``LanguageModel``) runs the same loop with a full
forward pass over a fixed-length buffer each turn (causal attention keeps the unwritten
tail from mattering): slower, the same tokens.

The tokens are those of a host loop stepping the same model one token at a time (same
keys, same draws): with ``per_row_keys`` row b's token t comes from ``fold_in(key_b, t)``,
else the batch's key is split once per turn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec
from theseus.models.layers.compute_weights import cast_for_compute
from theseus.models.layers.kernel_sharding import cache_specs
from theseus.models.layers.kv_cache import KVCache
from theseus.models.sampling import Sampling, sample, sample_rows, token_logprob


@dataclass(frozen=True)
class DecodePlan:
    """The static shape of one decoding loop (a ``jax.jit`` static argument)."""

    max_new_tokens: int
    sampling: Sampling = Sampling()
    stops: tuple[int, ...] = ()
    pad_id: int = 0
    #: positions the KV cache holds (prompt width + new tokens); 0: no cache, a full
    #: forward pass per token
    cache_slots: int = 0
    reader: str = "reference"  # how a turn reads the cache (``decode_attention.READERS``)
    per_row_keys: bool = False  # one key per row (``keys`` is B keys), else one for all


class Decoded(NamedTuple):
    """What a loop returns: BxN token ids (the pad id after a row's stop token) and their
    log-probabilities, and how many turns ran."""

    tokens: jax.Array
    logps: jax.Array
    turns: jax.Array


def decode_loop(
    graphdef: Any,
    plan: DecodePlan,
    states: tuple[Any, ...],
    tokens_BxP: jax.Array,
    positions_BxP: jax.Array,
    segments_BxP: jax.Array,
    keys: jax.Array,
) -> Decoded:
    """Decode ``plan.max_new_tokens`` tokens after each (left-padded) prompt of the model
    ``nnx.merge(graphdef, *states)``: meant to run under ``jax.jit`` with ``graphdef`` and
    ``plan`` static."""
    model = nnx.merge(graphdef, *states)
    cast_for_compute(model)
    state = nnx.state(model)  # cast once, outside the loop

    def fresh() -> Any:  # the model's variables made at the trace level it runs at
        return nnx.merge(graphdef, jax.tree.map(lambda x: x, state))

    B, P = tokens_BxP.shape
    N = plan.max_new_tokens
    memory: Any  # the cache, or the buffer of full forward passes
    if plan.cache_slots:
        advance, memory = cached_turns(fresh, plan, tokens_BxP, positions_BxP, segments_BxP)
    else:
        advance, memory = forward_turns(fresh, plan, tokens_BxP, positions_BxP, segments_BxP)
    logits, memory = advance(None, 0, memory)
    stops = jnp.asarray(plan.stops or (-1,), jnp.int32)
    how = plan.sampling

    def turn(loop: tuple) -> tuple:
        t, logits, memory, done, out, out_logp, key = loop
        if plan.per_row_keys:
            token = sample_rows(logits, keys, t, how)
        else:
            key, sub = jax.random.split(key)
            token = sample(logits, sub, how.temperature, how.top_k, how.top_p)
        logp = token_logprob(logits, token, how.temperature)
        token = jnp.where(done, plan.pad_id, token)
        out = jax.lax.dynamic_update_index_in_dim(out, token, t, axis=1)
        out_logp = jax.lax.dynamic_update_index_in_dim(out_logp, logp, t, axis=1)
        done = done | jnp.isin(token, stops)
        logits, memory = advance(token, t, memory)
        return t + 1, logits, memory, done, out, out_logp, key

    def going(loop: tuple) -> jax.Array:
        t, done = loop[0], loop[3]
        return (t < N) & ~jnp.all(done)

    start = (
        jnp.zeros((), jnp.int32),
        logits,
        memory,
        jnp.zeros((B,), bool),
        jnp.zeros((B, N), jnp.int32),
        jnp.zeros((B, N), jnp.float32),
        keys if not plan.per_row_keys else jnp.zeros((), jnp.int32),
    )
    turns, _, _, _, out, out_logp, _ = jax.lax.while_loop(going, turn, start)
    return Decoded(out, out_logp, turns)


def cached_turns(
    model: Any, plan: DecodePlan, tokens: jax.Array, positions: jax.Array, segments: jax.Array
) -> tuple[Any, KVCache]:
    """``advance(token, t, cache) -> (logits, cache)`` through the KV cache (the prefill when
    ``token`` is None), and the empty cache; ``model()`` makes the model."""
    B = tokens.shape[0]
    built = model()
    cache = laid_out(built.init_cache(B, plan.cache_slots, plan.reader), built)
    next_position = positions[:, -1] + 1
    ones = jnp.ones((B, 1), jnp.int32)

    def advance(token: jax.Array | None, t: Any, cache: KVCache) -> tuple[jax.Array, KVCache]:
        if token is None:
            return last_logits(model(), tokens, positions, segments, cache)
        where = (next_position + t)[:, None]
        return last_logits(model(), token[:, None], where, ones, cache)

    return advance, cache


def last_logits(
    model: Any, tokens: jax.Array, positions: jax.Array, segments: jax.Array, cache: KVCache
) -> tuple[jax.Array, KVCache]:
    """The logits of the last position (B x V, float32) and the cache after ``tokens``."""
    if hasattr(model, "hidden_with_stats") and hasattr(model, "head"):
        hidden, _, _, cache = model.hidden_with_stats(
            tokens, positions=positions, segment_ids=segments, cache=cache
        )
        return model.head(hidden[:, -1:])[:, 0].astype(jnp.float32), cache
    logits, cache = model.decode(tokens, cache, positions=positions, segment_ids=segments)
    return logits[:, -1].astype(jnp.float32), cache


def laid_out(cache: KVCache, model: Any) -> KVCache:
    """The cache split like the decoding kernel reads it, on the mesh of the model's plan
    (the one the loop is traced under): its rows over the batch axes, its kv heads over
    ``tensor``, so no turn reshards it."""
    sizes = dict(getattr(getattr(model, "execution", None), "mesh_axes", ()) or ())
    if math.prod(sizes.values()) <= 1:
        return cache
    heads = kv_heads(model)
    spec, rows, _ = cache_specs(sizes, cache.k.shape[1], heads, heads)
    k, v = (jax.lax.with_sharding_constraint(x, spec) for x in (cache.k, cache.v))
    segments = jax.lax.with_sharding_constraint(cache.segment_ids, PartitionSpec(rows))
    return replace(cache, k=k, v=v, segment_ids=segments)


def forward_turns(
    model: Any, plan: DecodePlan, tokens: jax.Array, positions: jax.Array, segments: jax.Array
) -> tuple[Any, jax.Array]:
    """``advance(token, t, buffer) -> (logits, buffer)`` by a full forward pass over a
    B x (P + N) buffer of tokens, and the buffer (prompts first, then padding); ``model()``
    makes the model."""
    B, P = tokens.shape
    N = plan.max_new_tokens
    buffer = jnp.concatenate([tokens, jnp.full((B, N), plan.pad_id, jnp.int32)], axis=1)
    all_segments = jnp.concatenate([segments, jnp.ones((B, N), jnp.int32)], axis=1)
    after = positions[:, -1:] + 1 + jnp.arange(N, dtype=jnp.int32)[None]
    all_positions = jnp.concatenate([positions, after], axis=1)

    def advance(token: jax.Array | None, t: Any, buffer: jax.Array) -> tuple[jax.Array, Any]:
        index = P - 1
        if token is not None:
            buffer = jax.lax.dynamic_update_index_in_dim(buffer, token, P + t, axis=1)
            index = P + t
        logits = model()(buffer, positions=all_positions, segment_ids=all_segments)
        return jax.lax.dynamic_index_in_dim(logits, index, axis=1, keepdims=False), buffer

    return advance, buffer


def kv_heads(model: Any) -> int:
    """The heads the cache keeps side by side in its key slot (1 when the model does not
    say: its cache is then not split over ``tensor``)."""
    if not hasattr(model, "per_layer"):
        return 1
    return int(model.per_layer()[0].attention.cache_shape()[0][0])
