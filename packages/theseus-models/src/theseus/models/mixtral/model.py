"""Mixtral: the Qwen3-MoE model (routed experts, load-balancing loss, routed FLOPs) with
Mistral's attention, which its config selects (no q/k norm, optional sliding window)."""

from __future__ import annotations

from theseus.models.mixtral.config import MixtralConfig
from theseus.models.qwen3_moe.model import Qwen3Moe


class Mixtral(Qwen3Moe):
    config: MixtralConfig
    config_class = MixtralConfig
