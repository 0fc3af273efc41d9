"""Qwen2: the Llama model; the differences (q/k/v biases, defaults) are in its config."""

from __future__ import annotations

from theseus.models.llama.model import Llama
from theseus.models.qwen2.config import Qwen2Config


class Qwen2(Llama):
    config: Qwen2Config
    config_class = Qwen2Config
