"""Qwen2 config (Llama's, with q/k/v biases and Qwen's defaults) and presets. No JAX."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import TINY, LlamaConfig


@dataclass(unsafe_hash=True)
class Qwen2Config(LlamaConfig):
    norm_eps: float = option(1e-6, "RMSNorm epsilon", gt=0)
    rope_theta: float = option(1000000.0, "RoPE base frequency", gt=0)
    qkv_bias: bool = option(True, "biases on the q, k and v projections")


# what the Qwen2.5 config.json files share: RoPE base 10^6, RMSNorm epsilon 10^-6, q/k/v biases
QWEN2: dict = {"rope_theta": 1000000.0, "norm_eps": 1e-6, "qkv_bias": True}

PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "d_ff": 128},
    # Qwen/Qwen2.5-0.5B config.json (Qwen2-0.5B is the same network, with 131,072 positions)
    "0.5b": {
        **QWEN2,
        "vocab_size": 151936,
        "n_layers": 24,
        "d_model": 896,
        "n_heads": 14,
        "n_kv_heads": 2,
        "d_ff": 4864,
        "max_seq_len": 32768,
        "tie_embeddings": True,
    },
    # Qwen/Qwen2.5-7B config.json (Qwen2-7B is the same network)
    "7b": {
        **QWEN2,
        "vocab_size": 152064,
        "n_layers": 28,
        "d_model": 3584,
        "n_heads": 28,
        "n_kv_heads": 4,
        "d_ff": 18944,
        "max_seq_len": 131072,
        "tie_embeddings": False,
    },
}

FAMILY = Family.of_package(__name__, Qwen2Config, PRESETS, "Qwen2: Llama with q/k/v biases")
