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
from theseus.core.recipes.preference import preference_loss, sequence_logps
from theseus.core.recipes.preference_config import PreferenceConfig
from theseus.core.recipes.pretrain import PretrainJob
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.step import forward


@dataclass
class DPOJobConfig(TrainJobConfig):
    dpo: PreferenceConfig = None  # type: ignore[assignment]  # always given by the job

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training.global_batch_size % 2:
            raise ConfigError(
                f"training.global_batch_size={self.training.global_batch_size}: preference "
                "training counts rows, two per pair (chosen, rejected); use an even number"
            )


def preference_objective(config: PreferenceConfig) -> Any:
    """``make(graphdef, rest, remat, adapted) -> objective`` for ``TrainSetup.build``."""

    def make(graphdef: Any, rest: Any, remat: str, adapted: bool) -> Any:
        def logps(params: Any, frozen: Any, batch: dict, key: Any) -> tuple[jax.Array, Any]:
            logits, _ = forward(graphdef, params, rest, batch, remat, frozen, key)
            return sequence_logps(logits, batch["targets"], batch["loss_mask"])

        def reference_logps(params: Any, frozen: Any, batch: dict) -> jax.Array:
            if config.loss == "simpo":  # reference-free
                return jnp.zeros(batch["targets"].shape[0], jnp.float32)
            if adapted:  # the base: every adapter's output zeroed
                off = jax.tree.map(jnp.zeros_like, params)
                return logps(off, frozen, batch, None)[0]
            return logps(frozen, None, batch, None)[0]  # the initial weights

        def objective(params: Any, frozen: Any, batch: dict, key: Any) -> tuple[jax.Array, Any]:
            policy, tokens = logps(params, frozen if adapted else None, batch, key)
            reference = jax.lax.stop_gradient(reference_logps(params, frozen, batch))
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


class DPOJob(PretrainJob):
    """Preference optimisation (DPO, IPO, SimPO) with LoRA or full fine-tuning."""

    config_type = DPOJobConfig
    layout = "pairs"

    @classmethod
    def setup_options(cls, config: DPOJobConfig) -> dict[str, Any]:
        """The preference objective; a frozen copy of the initial weights as the reference
        when every weight trains (LoRA's reference is the base; SimPO has none)."""
        return {
            "objective": preference_objective(config.dpo),
            "keeps_reference": config.lora.rank == 0 and config.dpo.loss != "simpo",
        }
