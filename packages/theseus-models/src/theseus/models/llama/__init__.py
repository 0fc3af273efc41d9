"""Llama 2/3: RMSNorm, SwiGLU, grouped-query attention, RoPE (with Llama 3 scaling)."""

from theseus.models.family import Family
from theseus.models.llama.config import PRESETS, LlamaConfig

FAMILY = Family(
    name="llama",
    config=LlamaConfig,
    model="theseus.models.llama.model:Llama",
    description="Llama 2/3: RMSNorm, SwiGLU, GQA, RoPE",
    presets=PRESETS,
    hf="theseus.models.llama.hf",
)
