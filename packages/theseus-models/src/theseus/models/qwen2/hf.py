"""Qwen2 <-> transformers ``Qwen2ForCausalLM``: Llama's layout, with q/k/v biases always."""

from __future__ import annotations

from theseus.models.hf_mapping import Rule
from theseus.models.llama.hf import decoder_from_hf, decoder_rules, decoder_to_hf
from theseus.models.qwen2.config import Qwen2Config

ARCHITECTURE = "Qwen2ForCausalLM"
MODEL_TYPE = "qwen2"


def config_from_hf(hf: dict) -> Qwen2Config:
    return Qwen2Config(**{**decoder_from_hf(hf, ARCHITECTURE), "qkv_bias": True, "out_bias": False})


def config_to_hf(c: Qwen2Config) -> dict:
    return decoder_to_hf(c, ARCHITECTURE, biases=(True, False), qk_norm=False)


def rules(c: Qwen2Config) -> list[Rule]:
    return decoder_rules(c)
