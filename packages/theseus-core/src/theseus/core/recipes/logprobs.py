"""Token log-probabilities of a batch's targets, and the reference policy's.

DPO and GRPO score answers by the log-probabilities of their tokens, under the policy being
trained and under a frozen reference: under LoRA the base with every adapter's output
zeroed (no second copy of the weights), else a copy of the starting weights kept in
``frozen`` (``Recipe.reference``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from theseus.core.train.chunked_logps import chunked_token_stats
from theseus.core.train.chunked_loss import loss_chunks
from theseus.core.train.recipe import ModelFn


def token_logps(logits_BxTxV: jax.Array, targets_BxT: jax.Array, temperature: float = 1.0):
    """log π(target) per position, in float32 (the targets are the next input tokens), of
    softmax(logits / temperature): the distribution rollouts are sampled from, as TRL
    scores policy and reference."""
    logits = logits_BxTxV.astype(jnp.float32) / temperature
    targets = jnp.maximum(targets_BxT, 0)  # padding may hold -100
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def reference_weights(params: Any, frozen: Any, adapted: bool) -> tuple[Any, Any]:
    """``(params, frozen)`` of the reference policy: the base with every adapter's output
    zeroed under LoRA (``adapted``), else the starting weights ``frozen`` holds."""
    if adapted:
        return jax.tree.map(jnp.zeros_like, params), frozen
    return frozen, None


def reference_token_logps(
    model_fn: ModelFn,
    params: Any,
    frozen: Any,
    batch: Mapping[str, Any],
    adapted: bool,
    temperature: float = 1.0,
) -> jax.Array:
    """The reference policy's (:func:`reference_weights`) :func:`token_logps` of
    ``batch``'s targets, without gradient."""
    logits = model_fn(*reference_weights(params, frozen, adapted), batch, None)[0]
    return jax.lax.stop_gradient(token_logps(logits, batch["targets"], temperature))


def token_stats(
    model_fn: ModelFn,
    params: Any,
    frozen: Any,
    batch: Mapping[str, Any],
    key: Any,
    temperature: float = 1.0,
) -> tuple[jax.Array, jax.Array, dict]:
    """(log π(target), entropy of π, aux) per position, π the softmax of logits /
    ``temperature``: the output head taken a few positions at a time
    (``train/chunked_logps.py``; as many pieces as keep one piece's float32 logits on a
    device within ``chunked_loss.CHUNK_BYTES``, or ``training.loss_chunks``), so the
    ``[B, T, V]`` logits never exist."""
    hidden, head, aux = model_fn.hidden(params, frozen, batch, key)
    B, T = batch["targets"].shape
    vocab = jax.eval_shape(head, hidden[:1, :1]).shape[-1]
    rows = max(B // max(model_fn.batch_shards, 1), 1)
    chunks = loss_chunks(
        rows, T, vocab, given=model_fn.loss_chunks, length_name="the recipe's batch length"
    )
    logp, entropy = chunked_token_stats(head, hidden, batch["targets"], temperature, chunks)
    return logp, entropy, aux


def reference_token_stats(
    model_fn: ModelFn,
    params: Any,
    frozen: Any,
    batch: Mapping[str, Any],
    adapted: bool,
    temperature: float = 1.0,
) -> jax.Array:
    """The reference policy's log π(target), its head taken a few positions at a time
    (:func:`token_stats`), without gradient."""
    weights = reference_weights(params, frozen, adapted)
    logp = token_stats(model_fn, *weights, batch, None, temperature)[0]
    return jax.lax.stop_gradient(logp)
