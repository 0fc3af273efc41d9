"""Training jobs generated for every registered model (cheap to import: no JAX)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from theseus.core.components import Choice, JobSpec
from theseus.core.data.config import DataConfig, PreferenceDataConfig, SFTDataConfig
from theseus.core.recipes.grpo_config import GRPOConfig
from theseus.core.recipes.preference_config import PreferenceConfig
from theseus.core.sharding.config import ShardingConfig
from theseus.core.train import configs as tc

if TYPE_CHECKING:
    from theseus.core.registry import Registries


def training_groups(model: str, data: type = DataConfig) -> dict[str, Any]:
    return {
        "training": tc.TrainingConfig,
        "model": Choice("models", model, locked=True),
        "data": data,
        "optimizer": Choice("optimizers", "adamw"),
        "schedule": Choice("schedules", "cosine"),
        "checkpoint": tc.CheckpointConfig,
        "logging": tc.LoggingConfig,
        "eval": tc.EvalConfig,
        "precision": tc.PrecisionConfig,
        "init": tc.InitConfig,
        "sharding": ShardingConfig,
        "lora": tc.LoRAConfig,
    }


def register_training_jobs(register: Any, registries: Registries) -> None:
    """Register ``<model>/train/{pretrain,sft,dpo,grpo}`` for each model."""
    for name, component in registries.models.items():
        register(
            JobSpec(
                key=f"{name}/train/pretrain",
                target="theseus.core.recipes.pretrain:PretrainJob",
                description=f"pretrain {name} on packed tokens ({component.description})".strip(),
                groups=training_groups(name),
            )
        )
        register(
            JobSpec(
                key=f"{name}/train/sft",
                target="theseus.core.recipes.pretrain:SFTJob",
                description=f"fine-tune {name} on padded chat data with a loss mask",
                groups=training_groups(name, SFTDataConfig),
            )
        )
        register(
            JobSpec(
                key=f"{name}/train/dpo",
                target="theseus.core.recipes.dpo:DPOJob",
                description=f"preference-tune {name} (DPO, IPO, SimPO) on chosen/rejected pairs",
                groups={**training_groups(name, PreferenceDataConfig), "dpo": PreferenceConfig},
            )
        )
        register(
            JobSpec(
                key=f"{name}/train/grpo",
                target="theseus.core.recipes.grpo:GRPOJob",
                description=f"reinforce {name} with verifiable rewards (GRPO, RLOO, Dr. GRPO)",
                groups={**training_groups(name, SFTDataConfig), "grpo": GRPOConfig},
            )
        )
