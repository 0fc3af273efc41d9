"""Mistral: Llama with sliding-window attention."""

from theseus.models.family import Family
from theseus.models.mistral.config import PRESETS, MistralConfig

FAMILY = Family(
    name="mistral",
    config=MistralConfig,
    model="theseus.models.mistral.model:Mistral",
    description="Mistral: Llama with sliding-window attention",
    presets=PRESETS,
    hf="theseus.models.mistral.hf",
)
