"""Qwen3 <-> transformers ``Qwen3ForCausalLM``: Llama's layout, with q/k RMSNorm."""

from __future__ import annotations

from theseus.models.hf_mapping import Rule
from theseus.models.llama.hf import decoder_from_hf, decoder_rules, decoder_to_hf
from theseus.models.qwen3.config import Qwen3Config

ARCHITECTURE = "Qwen3ForCausalLM"
MODEL_TYPE = "qwen3"


def config_from_hf(hf: dict) -> Qwen3Config:
    return Qwen3Config(qk_norm=True, **decoder_from_hf(hf, ARCHITECTURE))


def config_to_hf(c: Qwen3Config) -> dict:
    biases = (c.qkv_bias, c.qkv_bias)
    return {
        **decoder_to_hf(c, ARCHITECTURE, biases=biases, qk_norm=True),
        "attention_bias": c.qkv_bias,
    }


def rules(c: Qwen3Config) -> list[Rule]:
    return decoder_rules(c)
