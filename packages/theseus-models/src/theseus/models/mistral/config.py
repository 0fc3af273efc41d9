"""Mistral config (Llama's, with Mistral's defaults) and presets. No JAX."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import TINY, LlamaConfig


@dataclass(unsafe_hash=True)
class MistralConfig(LlamaConfig):
    sliding_window: int = option(
        4096,
        "attend to at most this many previous tokens (the token itself included); 0 = no limit",
        ge=0,
    )


# mistralai/Mistral-7B-v0.1 config.json
MISTRAL_7B: dict = {
    "vocab_size": 32000,
    "n_layers": 32,
    "d_model": 4096,
    "n_heads": 32,
    "n_kv_heads": 8,
    "head_dim": 128,
    "d_ff": 14336,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "max_seq_len": 32768,
    "norm_eps": 1e-5,
    "tie_embeddings": False,
}

PRESETS: dict[str, dict] = {
    "tiny": {**TINY, "d_ff": 128, "sliding_window": 8},
    "7b": MISTRAL_7B,
    # mistralai/Mistral-7B-v0.3 config.json: a 32,768-token vocabulary, full attention, a
    # larger RoPE base
    "7b-v0.3": {
        **MISTRAL_7B,
        "vocab_size": 32768,
        "rope_theta": 1000000.0,
        "sliding_window": 0,
    },
}

FAMILY = Family.of_package(
    __name__, MistralConfig, PRESETS, "Mistral: Llama with sliding-window attention"
)
