"""Qwen3-MoE: Qwen3 attention; every block's MLP is a top-k routed mixture of SwiGLU experts."""

from theseus.models.family import Family
from theseus.models.qwen3_moe.config import PRESETS, Qwen3MoeConfig

FAMILY = Family(
    name="qwen3_moe",
    config=Qwen3MoeConfig,
    model="theseus.models.qwen3_moe.model:Qwen3Moe",
    description="Qwen3-MoE: Qwen3 attention, top-k routed SwiGLU experts",
    presets=PRESETS,
    hf="theseus.models.qwen3_moe.hf",
)
