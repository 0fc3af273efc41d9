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


# what the Qwen3 config.json files share: the 151,936-row embedding, RoPE base 10^6,
# RMSNorm epsilon 10^-6, heads of 128 with q/k norms, 40,960 positions
QWEN3: dict = {
    "vocab_size": 151936,
    "rope_theta": 1000000.0,
    "norm_eps": 1e-6,
    "head_dim": 128,
    "qk_norm": True,
    "max_seq_len": 40960,
}

PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "head_dim": 16, "d_ff": 128},
    # Qwen/Qwen3-0.6B config.json
    "0.6b": {
        **QWEN3,
        "n_layers": 28,
        "d_model": 1024,
        "n_heads": 16,
        "n_kv_heads": 8,
        "d_ff": 3072,
        "tie_embeddings": True,
    },
    # Qwen/Qwen3-8B config.json
    "8b": {
        **QWEN3,
        "n_layers": 36,
        "d_model": 4096,
        "n_heads": 32,
        "n_kv_heads": 8,
        "d_ff": 12288,
        "tie_embeddings": False,
    },
}

FAMILY = Family.of_package(__name__, Qwen3Config, PRESETS, "Qwen3: Llama with q/k RMSNorm")
