"""Gemma 3 (text): local sliding-window and global layers, sandwich norms, GeGLU, scaled embeddings."""

from theseus.models.family import Family
from theseus.models.gemma3.config import PRESETS, Gemma3Config

FAMILY = Family(
    name="gemma3",
    config=Gemma3Config,
    model="theseus.models.gemma3.model:Gemma3",
    description="Gemma 3 (text): interleaved local/global attention, q/k norm, sandwich norms, "
    "GeGLU",
    presets=PRESETS,
    hf="theseus.models.gemma3.hf",
)
