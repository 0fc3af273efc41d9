"""Qwen3: Llama with a per-head RMSNorm on queries and keys."""

from theseus.models.family import Family
from theseus.models.qwen3.config import PRESETS, Qwen3Config

FAMILY = Family(
    name="qwen3",
    config=Qwen3Config,
    model="theseus.models.qwen3.model:Qwen3",
    description="Qwen3: Llama with q/k RMSNorm",
    presets=PRESETS,
    hf="theseus.models.qwen3.hf",
)
