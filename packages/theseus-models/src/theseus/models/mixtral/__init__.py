"""Mixtral: Mistral attention; every block's MLP is a top-2 softmax-routed mixture of experts."""

from theseus.models.family import Family
from theseus.models.mixtral.config import PRESETS, MixtralConfig

FAMILY = Family(
    name="mixtral",
    config=MixtralConfig,
    model="theseus.models.mixtral.model:Mixtral",
    description="Mixtral: Mistral attention, top-2 routed SwiGLU experts",
    presets=PRESETS,
    hf="theseus.models.mixtral.hf",
)
