"""Qwen2: Llama with biases on the q, k and v projections."""

from theseus.models.qwen2.config import FAMILY

__all__ = ["FAMILY"]
