"""Mixtral config (Qwen3-MoE's expert fields, Mistral's attention and defaults) and presets.

Mixtral's sparse MoE is Qwen3-MoE's (softmax router, top-k, renormalised weights, the same
load-balancing loss); its attention is Mistral's (no q/k norm, head_dim d_model / n_heads,
an optional sliding window). No JAX.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import TINY
from theseus.models.mistral.config import MISTRAL_7B
from theseus.models.moe_fields import TINY_EXPERTS
from theseus.models.qwen3_moe.config import Qwen3MoeConfig


@dataclass(unsafe_hash=True)
class MixtralConfig(Qwen3MoeConfig):
    norm_eps: float = option(1e-5, "RMSNorm epsilon", gt=0)
    head_dim: int = option(0, "width of one head; 0 means d_model // n_heads", ge=0)
    qk_norm: bool = option(False, "RMSNorm on queries and keys per head")
    router_aux_loss_coef: float = option(0.02, "weight of the load-balancing loss", ge=0)


PRESETS: dict[str, dict] = {
    "tiny": {**TINY, **TINY_EXPERTS, "sliding_window": 8},
    # mistralai/Mixtral-8x7B-v0.1 config.json: Mistral 7B with each MLP made 8 experts of its
    # width (top 2), a larger RoPE base and no sliding window
    "8x7b": {
        **{key: value for key, value in MISTRAL_7B.items() if key != "d_ff"},
        "n_experts": 8,
        "n_experts_per_token": 2,
        "moe_d_ff": MISTRAL_7B["d_ff"],
        "rope_theta": 1000000.0,
        "sliding_window": 0,
        "router_aux_loss_coef": 0.02,
    },
}

FAMILY = Family.of_package(
    __name__, MixtralConfig, PRESETS, "Mixtral: Mistral attention, top-2 routed SwiGLU experts"
)
