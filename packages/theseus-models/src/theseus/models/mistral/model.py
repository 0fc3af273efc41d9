"""Mistral: the Llama model; the sliding window (every attention implementation has one) is
in its config."""

from __future__ import annotations

from theseus.models.llama.model import Llama
from theseus.models.mistral.config import MistralConfig


class Mistral(Llama):
    config: MistralConfig
    config_class = MistralConfig
