"""Qwen3: the Llama model; the differences (q/k RMSNorm, head_dim, defaults) are in its config."""

from __future__ import annotations

from theseus.models.llama.model import Llama
from theseus.models.qwen3.config import Qwen3Config


class Qwen3(Llama):
    config: Qwen3Config
    config_class = Qwen3Config
