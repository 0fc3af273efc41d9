"""Shared layers: each exposes its stages as small methods a subclass can override."""

from theseus.models.layers.attention import Attention, MaskInfo
from theseus.models.layers.block import Block
from theseus.models.layers.decoder import DecoderLM
from theseus.models.layers.embedding import Embedding
from theseus.models.layers.kv_cache import KVCache, LayerCache
from theseus.models.layers.linear import Linear
from theseus.models.layers.mlp import MLP, SwiGLU
from theseus.models.layers.norms import LayerNorm, RMSNorm
from theseus.models.layers.rope import RoPE

__all__ = [
    "Attention",
    "Block",
    "DecoderLM",
    "Embedding",
    "KVCache",
    "LayerCache",
    "LayerNorm",
    "Linear",
    "MaskInfo",
    "MLP",
    "RMSNorm",
    "RoPE",
    "SwiGLU",
]
