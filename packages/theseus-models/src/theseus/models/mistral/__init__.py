"""Mistral: Llama with sliding-window attention."""

from theseus.models.mistral.config import FAMILY

__all__ = ["FAMILY"]
