"""GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, biases, tied embeddings."""

from theseus.models.gpt.config import FAMILY

__all__ = ["FAMILY"]
