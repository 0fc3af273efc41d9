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
from theseus.core.train.recipe import ModelFn


def token_logps(logits_BxTxV: jax.Array, targets_BxT: jax.Array, temperature: float = 1.0):
    """log π(target) per position, in float32 (the targets are the next input tokens), of
    softmax(logits / temperature): the distribution rollouts are sampled from, as TRL
    scores policy and reference."""
    logits = logits_BxTxV.astype(jnp.float32) / temperature
    targets = jnp.maximum(targets_BxT, 0)  # padding may hold -100
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def reference_token_logps(
    model_fn: ModelFn,
    params: Any,
    frozen: Any,
    batch: Mapping[str, Any],
    adapted: bool,
    temperature: float = 1.0,
) -> jax.Array:
    """The reference policy's :func:`token_logps` of ``batch``'s targets, without gradient:
    the base with its adapters off under LoRA (``adapted``), else the starting weights that
    ``frozen`` holds."""
    if adapted:
        logits = model_fn(jax.tree.map(jnp.zeros_like, params), frozen, batch, None)[0]
    else:
        logits = model_fn(frozen, None, batch, None)[0]
    return jax.lax.stop_gradient(token_logps(logits, batch["targets"], temperature))
