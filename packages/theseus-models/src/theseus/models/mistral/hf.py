"""Mistral <-> transformers ``MistralForCausalLM``: Llama's layout, with a sliding window."""

from __future__ import annotations

from theseus.models.hf_mapping import Rule
from theseus.models.llama.hf import decoder_from_hf, decoder_rules, decoder_to_hf
from theseus.models.mistral.config import MistralConfig

ARCHITECTURE = "MistralForCausalLM"
MODEL_TYPE = "mistral"


def config_from_hf(hf: dict) -> MistralConfig:
    return MistralConfig(
        sliding_window=hf.get("sliding_window") or 0, **decoder_from_hf(hf, ARCHITECTURE)
    )


def config_to_hf(c: MistralConfig) -> dict:
    config = decoder_to_hf(
        c, ARCHITECTURE, biases=(False, False), qk_norm=False, sliding_window=True
    )
    return {**config, "sliding_window": c.sliding_window or None}


def rules(c: MistralConfig) -> list[Rule]:
    return decoder_rules(c)
