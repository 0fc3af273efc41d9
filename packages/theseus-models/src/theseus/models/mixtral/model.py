"""Mixtral: Llama's decoder with Qwen3-MoE's experts (``layers/moe_decoder.py``'s
``SoftmaxExpertsDecoder``: routed experts, load-balancing loss, routed FLOPs); its config
selects Mistral's attention (no q/k norm, optional sliding window), which is Llama's."""

from __future__ import annotations

from theseus.models.layers.moe_decoder import SoftmaxExpertsDecoder
from theseus.models.llama.model import Llama
from theseus.models.mixtral.config import MixtralConfig


class Mixtral(SoftmaxExpertsDecoder, Llama):
    config: MixtralConfig
    config_class = MixtralConfig
