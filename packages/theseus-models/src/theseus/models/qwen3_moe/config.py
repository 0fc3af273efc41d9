"""Qwen3-MoE config (Qwen3's, plus the routed experts) and presets. No JAX."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.qwen3.config import Qwen3Config


@dataclass(unsafe_hash=True)
class Qwen3MoeConfig(Qwen3Config):
    n_experts: int = option(8, "number of routed experts", ge=1)
    n_experts_per_token: int = option(2, "experts each token is routed to (top-k)", ge=1)
    moe_d_ff: int = option(256, "hidden width of each expert", ge=1)
    norm_topk_prob: bool = option(True, "renormalise the top-k router probabilities to sum to 1")
    router_aux_loss_coef: float = option(0.001, "weight of the load-balancing loss", ge=0)
    shared_expert_d_ff: int = option(
        0, "hidden width of an always-on shared expert; 0 = none", ge=0
    )
    capacity_factor: float = option(
        0.0, "expert capacity = factor * tokens * k / experts; 0 = dropless", ge=0
    )
    moe_grouping: str = option(
        "tiles",
        "dropless expert matmuls: tiles (batched over per-expert tiles, routed FLOPs on every "
        "backend) | ragged_dot (jax.lax.ragged_dot: grouped on TPU, every expert elsewhere)",
        resume_safe=True,
    )


PRESETS: dict[str, dict] = {
    "tiny": {
        "n_layers": 2,
        "d_model": 64,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 16,
        "n_experts": 4,
        "n_experts_per_token": 2,
        "moe_d_ff": 32,
    },
    "30b-a3b": {
        "n_layers": 48,
        "d_model": 2048,
        "n_heads": 32,
        "n_kv_heads": 4,
        "head_dim": 128,
        "n_experts": 128,
        "n_experts_per_token": 8,
        "moe_d_ff": 768,
        "max_seq_len": 40960,
    },
}
