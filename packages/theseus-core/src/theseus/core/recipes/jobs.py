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
        pretrain = f"pretrain {name} on packed tokens ({component.description})".strip()
        recipes: list[tuple[str, str, str, dict[str, Any]]] = [
            ("pretrain", "pretrain:PretrainJob", pretrain, training_groups(name)),
            ("sft", "pretrain:SFTJob", f"fine-tune {name} on padded chat data with a loss mask",
             training_groups(name, SFTDataConfig)),
            ("dpo", "dpo:DPOJob",
             f"preference-tune {name} (DPO, IPO, SimPO) on chosen/rejected pairs",
             {**training_groups(name, PreferenceDataConfig), "dpo": PreferenceConfig}),
            ("grpo", "grpo:GRPOJob",
             f"reinforce {name} with verifiable rewards (GRPO, RLOO, Dr. GRPO)",
             {**training_groups(name, SFTDataConfig), "grpo": GRPOConfig}),
        ]  # fmt: skip
        for recipe, target, description, groups in recipes:
            key = f"{name}/train/{recipe}"
            register(JobSpec(key, f"theseus.core.recipes.{target}", description, groups))
