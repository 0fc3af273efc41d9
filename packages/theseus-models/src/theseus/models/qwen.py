"""Qwen2 (Llama with q/k/v biases) and Qwen3 (Llama with per-head q/k RMSNorm).

The architecture differences are config defaults (``qkv_bias``, ``qk_norm``, ``head_dim``);
the classes exist so each family has its own name, presets and Hugging Face mapping.
"""

from __future__ import annotations

from theseus.models.configs import Qwen2Config, Qwen3Config
from theseus.models.llama import Llama

__all__ = ["Qwen2", "Qwen2Config", "Qwen3", "Qwen3Config"]


class Qwen2(Llama):
    config: Qwen2Config
    config_class = Qwen2Config


class Qwen3(Llama):
    config: Qwen3Config
    config_class = Qwen3Config
