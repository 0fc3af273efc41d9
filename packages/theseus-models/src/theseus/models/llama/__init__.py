"""Llama 2/3: RMSNorm, SwiGLU, grouped-query attention, RoPE (with Llama 3 scaling)."""

from theseus.models.llama.config import FAMILY

__all__ = ["FAMILY"]
