"""Qwen2: Llama with biases on the q, k and v projections."""

from theseus.models.family import Family
from theseus.models.qwen2.config import PRESETS, Qwen2Config

FAMILY = Family(
    name="qwen2",
    config=Qwen2Config,
    model="theseus.models.qwen2.model:Qwen2",
    description="Qwen2: Llama with q/k/v biases",
    presets=PRESETS,
    hf="theseus.models.qwen2.hf",
)
