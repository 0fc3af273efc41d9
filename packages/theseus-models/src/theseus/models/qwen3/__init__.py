"""Qwen3: Llama with a per-head RMSNorm on queries and keys."""

from theseus.models.qwen3.config import FAMILY

__all__ = ["FAMILY"]
