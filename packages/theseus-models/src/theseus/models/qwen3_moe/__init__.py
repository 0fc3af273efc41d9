"""Qwen3-MoE: Qwen3 attention; every block's MLP is a top-k routed mixture of SwiGLU experts."""

from theseus.models.qwen3_moe.config import FAMILY

__all__ = ["FAMILY"]
