"""GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, biases, tied embeddings."""

from theseus.models.family import Family
from theseus.models.gpt.config import PRESETS, GPTConfig

FAMILY = Family(
    name="gpt",
    config=GPTConfig,
    model="theseus.models.gpt.model:GPT",
    description="GPT-2: learned positions, LayerNorm, GELU, tied",
    presets=PRESETS,
    hf="theseus.models.gpt.hf",
)
