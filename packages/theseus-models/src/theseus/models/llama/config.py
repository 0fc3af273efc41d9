"""Llama config and size presets (cheap to import: no JAX).

``LlamaConfig`` is also the base of the Qwen configs, which change defaults and add fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.config import ModelConfig
from theseus.models.family import Family


@dataclass(unsafe_hash=True)
class LlamaConfig(ModelConfig):
    n_kv_heads: int = option(2, "key/value heads (GQA); must divide n_heads; 1 is MQA", ge=1)
    head_dim: int = option(0, "width of one head; 0 means d_model // n_heads", ge=0)
    d_ff: int = option(1024, "SwiGLU hidden width", ge=1)
    norm_eps: float = option(1e-5, "RMSNorm epsilon", gt=0)
    rope_theta: float = option(10000.0, "RoPE base frequency", gt=0)
    rope_scaling: str = option(
        "none", "RoPE frequency scaling: 'none' or 'llama3'", choices=("none", "llama3")
    )
    rope_factor: float = option(8.0, "llama3 scaling: factor", gt=0)
    rope_low_freq_factor: float = option(1.0, "llama3 scaling: low frequency factor", gt=0)
    rope_high_freq_factor: float = option(4.0, "llama3 scaling: high frequency factor", gt=0)
    rope_original_max_len: int = option(8192, "llama3 scaling: original context length", ge=1)
    qkv_bias: bool = option(False, "biases on the q, k and v projections")
    out_bias: bool = option(False, "bias on the attention output projection")
    mlp_bias: bool = option(False, "biases in the MLP")
    qk_norm: bool = option(False, "RMSNorm on queries and keys per head (Qwen3)")
    sliding_window: int = option(
        0, "attend to at most this many previous tokens; 0 = no limit", ge=0
    )
    tie_embeddings: bool = option(False, "share the token embedding with the output head")


# the shape of the Llama-style families' ``tiny`` presets (each adds its own few fields)
TINY: dict = {"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2}

# what every Llama 3.1/3.2 config.json shares: the 128,256-token vocabulary, RoPE base
# 500,000 with llama3 frequency scaling, 131,072 positions
LLAMA3: dict = {
    "vocab_size": 128256,
    "norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": "llama3",
    "rope_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_len": 8192,
    "max_seq_len": 131072,
    "tie_embeddings": False,
}

PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "d_ff": 128},
    # meta-llama/Llama-3.2-1B config.json (tied embeddings, RoPE scaling factor 32)
    "1b": {
        **LLAMA3,
        "n_layers": 16,
        "d_model": 2048,
        "n_heads": 32,
        "n_kv_heads": 8,
        "head_dim": 64,
        "d_ff": 8192,
        "rope_factor": 32.0,
        "tie_embeddings": True,
    },
    # meta-llama/Llama-3.1-8B config.json
    "8b": {
        **LLAMA3,
        "n_layers": 32,
        "d_model": 4096,
        "n_heads": 32,
        "n_kv_heads": 8,
        "head_dim": 128,
        "d_ff": 14336,
    },
    # meta-llama/Llama-3.1-70B config.json
    "70b": {
        **LLAMA3,
        "n_layers": 80,
        "d_model": 8192,
        "n_heads": 64,
        "n_kv_heads": 8,
        "head_dim": 128,
        "d_ff": 28672,
    },
}

FAMILY = Family.of_package(__name__, LlamaConfig, PRESETS, "Llama 2/3: RMSNorm, SwiGLU, GQA, RoPE")
