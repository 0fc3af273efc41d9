"""Generation: prompts (token ids) in, continuations and their log-probabilities out.

The prompts are left-padded to one width and decoded by one compiled loop
(:mod:`theseus.models.decoding`: prefill, then a ``lax.while_loop`` over new tokens with the
KV cache updated in place). Greedy when ``temperature == 0``; otherwise temperature, top-k
and top-p sampling from a seeded key (reproducible), or with ``seeds`` from one key per row,
so that a row's tokens do not depend on the rest of the batch. A row stops at its first stop
token (kept in its output).

A model without a KV cache (only core's ``LanguageModel`` protocol, e.g. a third-party
family) generates too, by a full forward pass per token over a fixed-length buffer (one
compilation). Slower, the same tokens.

One compilation serves every batch of the same shape: prompt widths are rounded up to a
multiple of ``PROMPT_QUANTUM`` (more left padding changes no token), so batches whose longest
prompts differ by a few tokens share a program.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.models.decoding import DecodePlan, decode_loop
from theseus.models.errors import ModelError, VocabMismatchError
from theseus.models.sampling import Sampling, sample

__all__ = ["generate", "generate_with_logprobs", "left_pad", "sample", "cache_reader"]

PROMPT_QUANTUM = 16  # prompt widths are padded to a multiple of this


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = 0, width: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, segment ids (1 real, 0 pad) and positions of left-padded prompts (B x P),
    ``P`` the longest prompt's length or ``width`` if larger."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ModelError("every prompt needs at least one token")
    width = max(width, max(len(p) for p in prompts))
    tokens = np.full((len(prompts), width), pad_id, np.int32)
    segments = np.zeros((len(prompts), width), np.int32)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt) :] = prompt
        segments[row, width - len(prompt) :] = 1
    positions = np.maximum(np.cumsum(segments, axis=1) - 1, 0).astype(np.int32)
    return tokens, segments, positions


def cache_reader(platform: str) -> str:
    """How a decoding step reads the KV cache on ``platform``: the Pallas kernel over the
    written slots on a TPU, plain JAX elsewhere (``layers/decode_attention.py``)."""
    return "pallas" if platform == "tpu" else "reference"


def cache_length(model: Any, width: int, max_new_tokens: int) -> int:
    """Positions the KV cache holds for prompts of ``width`` and ``max_new_tokens`` new
    tokens (0: the model has no cache, it decodes by full forward passes)."""
    if not (hasattr(model, "init_cache") and hasattr(model, "decode")):
        return 0
    return width + max_new_tokens


def generate(model: Any, prompts: Sequence[Sequence[int]], **options: Any) -> list[list[int]]:
    """New token ids for each prompt (up to ``max_new_tokens``, ending at a stop token);
    the options are those of :func:`generate_with_logprobs`."""
    return generate_with_logprobs(model, prompts, **options)[0]


def generate_with_logprobs(
    model: Any,
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
    reader: str | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """New token ids for each prompt (up to ``max_new_tokens``, ending at a stop token), and
    the log-probability of each under softmax(logits / temperature) as the decoder computed
    it (before top-k/top-p filtering: the distribution a trainer scores).

    ``seeds`` (one per prompt) replaces ``seed``: row i samples from keys of ``seeds[i]``.
    ``reader``: how decoding steps read the KV cache (default: :func:`cache_reader` of the
    default backend)."""
    check_prompts(model, prompts, max_new_tokens)
    if seeds is not None and len(seeds) != len(prompts):
        raise ModelError(f"{len(seeds)} seeds for {len(prompts)} prompts: give one seed per prompt")
    width = -(-max(len(p) for p in prompts) // PROMPT_QUANTUM) * PROMPT_QUANTUM
    width = max(min(width, model.config.max_seq_len - max_new_tokens), 1)
    tokens, segments, positions = left_pad(prompts, pad_id, width)
    reader = reader or cache_reader(jax.default_backend())
    plan = DecodePlan(
        max_new_tokens=max_new_tokens,
        sampling=Sampling(float(temperature), int(top_k), float(top_p)),
        stops=tuple(sorted(set(int(t) for t in stop_tokens))),
        pad_id=int(pad_id),
        cache_slots=cache_length(model, tokens.shape[1], max_new_tokens),
        reader=reader,
        per_row_keys=seeds is not None,
    )
    keys = row_keys(seeds) if seeds is not None else jax.random.key(seed)
    graphdef, state = nnx.split(model)
    out = compiled_loop(graphdef, plan, (state,), tokens, positions, segments, keys)
    return trimmed(np.asarray(out.tokens), np.asarray(out.logps), plan.stops)


@partial(jax.jit, static_argnums=(0, 1))
def compiled_loop(graphdef, plan, states, tokens, positions, segments, keys):
    return decode_loop(graphdef, plan, states, tokens, positions, segments, keys)


def row_keys(seeds: Sequence[int]) -> jax.Array:
    """One key per row, from its seed."""
    return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))


def check_prompts(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    """Refuse token ids outside the vocabulary and prompts too long for the model."""
    vocab = model.config.vocab_size
    for prompt in prompts:
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise VocabMismatchError(
                f"prompt token id {bad[0]} is outside the model's vocab_size={vocab}"
            )
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ModelError("every prompt needs at least one token")
    P = max(len(p) for p in prompts)
    length = P + max_new_tokens
    if length > model.config.max_seq_len:
        raise ModelError(
            f"prompt of {P} tokens + max_new_tokens={max_new_tokens} = {length} exceeds the "
            f"model's max_seq_len={model.config.max_seq_len}"
        )


def trimmed(
    tokens_BxN: np.ndarray, logps_BxN: np.ndarray, stops: Sequence[int]
) -> tuple[list[list[int]], list[list[float]]]:
    """Each row up to and including its first stop token (all of it without one)."""
    stop_set = set(stops)
    results, logprobs = [], []
    for ids, logps in zip(tokens_BxN.tolist(), logps_BxN, strict=True):
        hit = next((i for i, token in enumerate(ids) if token in stop_set), None)
        n = len(ids) if hit is None else hit + 1
        results.append(ids[:n])
        logprobs.append(logps[:n].tolist())
    return results, logprobs
