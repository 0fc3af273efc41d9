"""Qwen3-MoE config (Qwen3's, plus the routed experts) and presets. No JAX."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import TINY
from theseus.models.moe_fields import TINY_EXPERTS, ExpertFields
from theseus.models.qwen3.config import QWEN3, Qwen3Config


@dataclass(unsafe_hash=True)
class Qwen3MoeConfig(ExpertFields, Qwen3Config):
    router_aux_loss_coef: float = option(0.001, "weight of the load-balancing loss", ge=0)
    shared_expert_d_ff: int = option(
        0, "hidden width of an always-on shared expert; 0 = none", ge=0
    )


PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "head_dim": 16, **TINY_EXPERTS},
    # Qwen/Qwen3-30B-A3B config.json (every layer sparse; intermediate_size, the dense
    # width, is unused but kept as config.json states it)
    "30b-a3b": {
        **QWEN3,
        "n_layers": 48,
        "d_model": 2048,
        "n_heads": 32,
        "n_kv_heads": 4,
        "d_ff": 6144,
        "n_experts": 128,
        "n_experts_per_token": 8,
        "moe_d_ff": 768,
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001,
        "tie_embeddings": False,
    },
}

FAMILY = Family.of_package(
    __name__, Qwen3MoeConfig, PRESETS, "Qwen3-MoE: Qwen3 attention, top-k routed SwiGLU experts"
)
