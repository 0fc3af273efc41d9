"""The GRPO step's objective and the scoring of π_old, on the trainer's own forward pass.

With ``grpo.iterations`` μ = 1 the policy that sampled is the one being trained, so π_old is
the policy's own log-probs without gradient: the ratio is 1 in value and its gradient is the
policy gradient (as TRL does when it reuses no rollouts). With μ > 1, π_old is scored once
by :func:`old_logps_step` on the weights that sampled and travels in the batch. Policy and
reference log-probs (and the logged entropy) are those of softmax(logits / temperature),
the distribution the rollouts were drawn from, as TRL scores them; the output head runs on
a few positions at a time (``logprobs.token_stats``), so a step never holds its rollouts'
``[B, T, V]`` float32 logits.

The formulas are :mod:`theseus.core.recipes.grpo_loss`; the job is
:mod:`theseus.core.recipes.grpo`, the rollouts :mod:`theseus.core.recipes.grpo_run`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from theseus.core.recipes.grpo_config import GRPOConfig
from theseus.core.recipes.grpo_loss import grpo_terms
from theseus.core.recipes.logprobs import reference_token_stats, token_stats
from theseus.core.train.recipe import MakeObjective, ModelFn, Objective
from theseus.core.train.setup import model_fn


def grpo_objective(config: GRPOConfig) -> MakeObjective:
    """``make(model_fn, adapted) -> objective`` for the GRPO recipe.

    The batch holds rollouts: ``inputs``/``targets`` (prompt + completion), ``loss_mask``
    (1 on completion targets), and ``advantages`` (each row's advantage on every column)."""

    def make(model_fn: ModelFn, adapted: bool) -> Objective:
        def objective(params: Any, frozen: Any, batch: Any, key: Any) -> tuple[jax.Array, Any]:
            logp, entropy, _ = token_stats(
                model_fn, params, frozen if adapted else None, batch, key, config.temperature
            )
            ref = None
            if config.beta > 0:  # the KL term's reference
                ref = reference_token_stats(
                    model_fn, params, frozen, batch, adapted, config.temperature
                )
            if config.iterations > 1:  # the policy that sampled, scored when it sampled
                old = batch["old_logps"]
            else:  # it is this policy: ratio 1, the gradient is the policy gradient
                old = jax.lax.stop_gradient(logp)
            advantages = batch["advantages"][:, 0]
            mask = batch["loss_mask"]
            sampler = batch["sampler_logps"]  # the decoder's own log-probs of the tokens
            weights = None
            if config.tis_cap > 0:
                ratio = jnp.exp(jax.lax.stop_gradient(old) - sampler)
                weights = jnp.minimum(ratio, config.tis_cap)
            num, den, sums = grpo_terms(config, logp, old, ref, advantages, mask, weights)
            gap = jnp.abs(jax.lax.stop_gradient(logp) - sampler)
            sums["sampler_logp_diff"] = (jnp.sum(gap * mask), jnp.sum(mask))
            sums["entropy"] = (jnp.sum(entropy * mask), jnp.sum(mask))
            metrics = {f"train/{k}": s / jnp.maximum(n, 1.0) for k, (s, n) in sums.items()}
            return num, (num, den, metrics)

        return objective

    return make


def old_logps_step(setup: Any, config: GRPOConfig) -> Any:
    """Jitted ``(state, batch) -> log-probs [B, T]`` of the rollouts under ``state``'s policy
    (π_old of the ``grpo.iterations`` updates that reuse them)."""
    adapted = setup.adapted

    forward = model_fn(
        setup.graphdef, setup.rest, setup.layout.batch_shards, setup.config.training.loss_chunks
    )

    def run(state: Any, batch: dict) -> jax.Array:
        frozen = state.frozen if adapted else None
        return token_stats(forward, state.params, frozen, batch, None, config.temperature)[0]

    return setup.layout.jit(run)
