"""GPT config and size presets (cheap to import: no JAX)."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.config import ModelConfig
from theseus.models.family import Family


@dataclass(unsafe_hash=True)
class GPTConfig(ModelConfig):
    # the default GPT is the README's main job: 4 x 128 learns visibly in about a minute on
    # two CPU cores (the shared 6 x 384 default took 3-4 minutes for 100 steps)
    n_layers: int = option(4, "number of transformer blocks", ge=1)
    d_model: int = option(128, "width of the residual stream", ge=1)
    n_heads: int = option(4, "number of query heads", ge=1)
    d_ff: int = option(0, "MLP hidden width; 0 means 4 * d_model", ge=0)
    positions: str = option("learned", "position encoding: 'learned' (GPT-2) or 'rope'")
    rope_theta: float = option(10000.0, "RoPE base when positions='rope'", gt=0)
    norm_eps: float = option(1e-5, "LayerNorm epsilon", gt=0)
    bias: bool = option(True, "biases in linear layers and LayerNorms")
    tie_embeddings: bool = option(True, "share the token embedding with the output head")


# what the four GPT-2 checkpoints' config.json share (openai-community/gpt2, gpt2-medium,
# gpt2-large, gpt2-xl): the 50,257-token BPE, 1,024 learned positions, tied embeddings
GPT2: dict = {
    "vocab_size": 50257,
    "max_seq_len": 1024,
    "positions": "learned",
    "norm_eps": 1e-5,
    "bias": True,
    "tie_embeddings": True,
}

PRESETS: dict[str, dict] = {
    "tiny": {"n_layers": 2, "d_model": 64, "n_heads": 4, "max_seq_len": 128},
    "124m": {**GPT2, "n_layers": 12, "d_model": 768, "n_heads": 12},  # gpt2
    "350m": {**GPT2, "n_layers": 24, "d_model": 1024, "n_heads": 16},  # gpt2-medium
    "774m": {**GPT2, "n_layers": 36, "d_model": 1280, "n_heads": 20},  # gpt2-large
    "1.5b": {**GPT2, "n_layers": 48, "d_model": 1600, "n_heads": 25},  # gpt2-xl
}

FAMILY = Family.of_package(
    __name__, GPTConfig, PRESETS, "GPT-2: learned positions, LayerNorm, GELU, tied"
)
