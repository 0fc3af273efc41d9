"""Reinforcement learning with verifiable rewards: ``<model>/train/grpo``.

Each step samples ``grpo.generations`` completions of each prompt from the current weights
with the compiled decoder of theseus-models (``theseus_sampler``), scores them with the reward plugins
(``theseus_register_rewards``), turns the rewards into group advantages and takes one
optimizer step (``grpo.iterations`` of them per batch) on the clipped objective of
:mod:`theseus.core.recipes.grpo_loss`. The rollouts are built on the host (``grpo_run``),
the step's objective is ``grpo_objective``; this module holds the job (cheap to import).

The reference of the KL term (``grpo.beta > 0``) is, as for DPO, the base with every adapter
off under LoRA, else a frozen copy of the starting weights; with ``beta = 0`` none is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from theseus.core.errors import ConfigError
from theseus.core.recipes.grpo_config import GRPOConfig
from theseus.core.recipes.grpo_objective import grpo_objective
from theseus.core.recipes.grpo_task import load_task
from theseus.core.recipes.pretrain import TrainingJob
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import Recipe, TrainerParts

if TYPE_CHECKING:
    from theseus.core.jobs import Prerequisite
    from theseus.core.recipes.grpo_run import Rollouts
    from theseus.core.rundir import RunDir


@dataclass
class GRPOJobConfig(TrainJobConfig):
    grpo: GRPOConfig

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.training.global_batch_size % self.grpo.generations:
            raise ConfigError(
                f"training.global_batch_size={self.training.global_batch_size} rows is not a "
                f"multiple of grpo.generations={self.grpo.generations}: each prompt's group of "
                "completions must be whole"
            )


class GRPOJob(TrainingJob[GRPOJobConfig]):
    """GRPO (and RLOO, Dr. GRPO) on the embedded addition task, full fine-tuning or LoRA."""

    config_type = GRPOJobConfig

    @classmethod
    def prerequisites(
        cls, config: GRPOJobConfig, root: str, run: RunDir | None = None
    ) -> list[Prerequisite]:
        """The task read first (a missing, malformed or too short task file is one line,
        before any prerequisite or chip time), then a training job's prerequisites."""
        load_task(config.grpo, config.training.seed)
        return super().prerequisites(config, root, run)

    @classmethod
    def dry_run(
        cls, config: GRPOJobConfig, root: str, as_json: bool = False, target: str | None = None
    ) -> Any:
        """The learning step's plan and the rollouts' (``recipes/grpo_plan.py``)."""
        load_task(config.grpo, config.training.seed)
        return super().dry_run(config, root, as_json, target)

    @classmethod
    def recipe(cls, config: GRPOJobConfig) -> Recipe[Rollouts]:
        """The clipped objective on rollouts sampled while training: their advantages and
        log-probs travel in the batch (the dry run lowers with them); the held-out accuracy
        replaces the validation loss. No dataset is read: the prompts come from the task,
        the tokenizer from the starting weights (rows ``padded``, as SFT's)."""
        fields = {"advantages": np.float32, "sampler_logps": np.float32}
        if config.grpo.iterations > 1:
            fields["old_logps"] = np.float32
        return Recipe(
            layout="padded",
            objective=grpo_objective(config.grpo),
            reference=config.lora.rank == 0 and config.grpo.beta > 0,
            extra_fields=fields,
            batches=rollouts,
            callbacks=rollout_callbacks,
            validation=False,
            plan=rollout_plan,
            reads_data=False,
        )


def rollout_plan(setup: Any) -> dict[str, Any]:
    """The rollouts in the dry run: cache, passes, fit, a decoding turn's time."""
    from theseus.core.recipes.grpo_plan import rollout_plan as plan

    return plan(setup)


def rollouts(setup: Any, data: Any, run: Any) -> Rollouts:
    """The run's batches: completions sampled from the weights being trained, scored."""
    from theseus.core.recipes.grpo_run import Rollouts

    return Rollouts(setup, data, run.path / "rollouts")


def rollout_callbacks(parts: TrainerParts[Rollouts]) -> list[Any]:
    """The rollouts' own callbacks: the new state handed over, the held-out accuracy."""
    from theseus.core.recipes.grpo_callbacks import HeldOutAccuracy, StateTap

    return [StateTap(parts.batches), HeldOutAccuracy(parts.batches, parts.writer, parts.flush)]
