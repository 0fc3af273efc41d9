"""Qwen3 config (Llama's, with per-head q/k RMSNorm and Qwen's defaults) and presets. No JAX."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import TINY, LlamaConfig


@dataclass(unsafe_hash=True)
class Qwen3Config(LlamaConfig):
    norm_eps: float = option(1e-6, "RMSNorm epsilon", gt=0)
    rope_theta: float = option(1000000.0, "RoPE base frequency", gt=0)
    head_dim: int = option(64, "width of one head (Qwen3 sets it independently of d_model)", ge=1)
    qk_norm: bool = option(True, "RMSNorm on queries and keys per head")


PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "head_dim": 16, "d_ff": 128},
    "0.6b": {
        "n_layers": 28,
        "d_model": 1024,
        "n_heads": 16,
        "n_kv_heads": 8,
        "head_dim": 128,
        "d_ff": 3072,
        "max_seq_len": 40960,
        "tie_embeddings": True,
    },
    "8b": {
        "n_layers": 36,
        "d_model": 4096,
        "n_heads": 32,
        "n_kv_heads": 8,
        "head_dim": 128,
        "d_ff": 12288,
        "max_seq_len": 40960,
    },
}

FAMILY = Family.of_package(__name__, Qwen3Config, PRESETS, "Qwen3: Llama with q/k RMSNorm")
