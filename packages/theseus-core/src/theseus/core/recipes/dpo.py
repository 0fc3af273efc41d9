"""Preference optimisation: ``<model>/train/dpo`` on (prompt, chosen, rejected) pairs.

The data comes in the ``pairs`` layout: row 2p of a batch is pair p's chosen answer, row
2p + 1 its rejected one, each masked to its answer tokens. The objective compares the policy's
log-probability of each answer with a frozen reference's (``theseus.core.recipes.preference``):

* with LoRA (``lora.rank > 0``) the reference is the base itself, the adapters switched off
  (their outputs zeroed): no second copy of the weights;
* with full fine-tuning it is a frozen copy of the initial weights, kept beside the trained
  ones and read again from its source (``init.hf``, ``init.checkpoint``) on resume;
* SimPO needs none.

It works under every sharding strategy like any step: the pair log-probs are reduced over the
global batch inside the jitted step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from theseus.core.errors import ConfigError
from theseus.core.recipes.logprobs import reference_token_logps
from theseus.core.recipes.preference import preference_loss, sequence_logps
from theseus.core.recipes.preference_config import PreferenceConfig
from theseus.core.recipes.pretrain import TrainingJob
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import MakeObjective, ModelFn, Objective, Recipe


@dataclass
class DPOJobConfig(TrainJobConfig):
    dpo: PreferenceConfig

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training.global_batch_size % 2:
            raise ConfigError(
                f"training.global_batch_size={self.training.global_batch_size}: preference "
                "training counts rows, two per pair (chosen, rejected); use an even number"
            )


def preference_objective(config: PreferenceConfig) -> MakeObjective:
    """``make(model_fn, adapted) -> objective`` for the DPO recipe."""

    def make(model_fn: ModelFn, adapted: bool) -> Objective:
        def reference_logps(params: Any, frozen: Any, batch: Any) -> jax.Array:
            if config.loss == "simpo":  # reference-free
                return jnp.zeros(batch["targets"].shape[0], jnp.float32)
            tokens = reference_token_logps(model_fn, params, frozen, batch, adapted)
            return jnp.sum(jnp.where(batch["loss_mask"].astype(bool), tokens, 0.0), axis=-1)

        def objective(params: Any, frozen: Any, batch: Any, key: Any) -> tuple[jax.Array, Any]:
            logits = model_fn(params, frozen if adapted else None, batch, key)[0]
            policy, tokens = sequence_logps(logits, batch["targets"], batch["loss_mask"])
            reference = reference_logps(params, frozen, batch)
            loss, metrics = preference_loss(
                config,
                policy[0::2],
                policy[1::2],
                reference[0::2],
                reference[1::2],
                tokens[0::2],
                tokens[1::2],
            )
            pairs = jnp.asarray(policy.shape[0] // 2, jnp.float32)
            total = loss * pairs
            return total, (total, pairs, {f"train/{k}": v for k, v in metrics.items()})

        return objective

    return make


class DPOJob(TrainingJob[DPOJobConfig]):
    """Preference optimisation (DPO, IPO, SimPO) with LoRA or full fine-tuning."""

    config_type = DPOJobConfig

    @classmethod
    def recipe(cls, config: DPOJobConfig) -> Recipe:
        """The preference objective on pairs; a frozen copy of the initial weights as the
        reference when every weight trains (LoRA's reference is the base; SimPO has none)."""
        return Recipe(
            layout="pairs",
            objective=preference_objective(config.dpo),
            reference=config.lora.rank == 0 and config.dpo.loss != "simpo",
        )
