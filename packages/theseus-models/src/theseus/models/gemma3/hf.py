"""Gemma 3 (text) <-> transformers ``Gemma3ForCausalLM`` (``model_type`` gemma3_text).

The norms around each sublayer are ``input_layernorm`` / ``post_attention_layernorm`` (the
attention's) and ``pre_feedforward_layernorm`` / ``post_feedforward_layernorm`` (the MLP's).
A norm weight w applies ``1 + w`` there and here, so the values map unchanged.

``attn_logit_softcapping`` is read and ignored, as transformers' Gemma 3 ignores it (Gemma 3
replaced Gemma 2's attention soft-capping by the q/k norms); the final soft-capping applies.
The multimodal ``Gemma3ForConditionalGeneration`` checkpoints (4B and up) are not imported:
their language model's tensors sit under another prefix beside a vision tower.
"""

from __future__ import annotations

from typing import Any

from theseus.models.errors import ModelError, UnsupportedArchitectureError
from theseus.models.gemma3.config import Gemma3Config
from theseus.models.hf_mapping import Rule
from theseus.models.llama.hf import decoder_rules, sizes_from_hf, sizes_to_hf

ARCHITECTURE = "Gemma3ForCausalLM"
MODEL_TYPE = "gemma3_text"
GLOBAL, LOCAL = "full_attention", "sliding_attention"


def layer_types(n_layers: int, global_every: int) -> list[str]:
    return [GLOBAL if (i + 1) % global_every == 0 else LOCAL for i in range(n_layers)]


def global_every_of(hf: dict) -> int:
    """The period of the config's ``layer_types`` (each run of local layers ends in a global
    one); a layout no period gives is refused."""
    n = hf["num_hidden_layers"]
    types = hf.get("layer_types")
    period = hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern") or 6
    if types:
        period = types.index(GLOBAL) + 1 if GLOBAL in types else max(period, n + 1)
        if list(types) != layer_types(n, period):
            raise UnsupportedArchitectureError(
                f"{ARCHITECTURE} with layer_types={types}: only a repeating run of local layers "
                "ending in a global one is supported"
            )
    return period


def rope_from_hf(hf: dict) -> dict[str, Any]:
    """Both layer kinds' RoPE (``rope_parameters`` per layer type, or the older top-level keys)."""
    params = hf.get("rope_parameters") or {}
    full = dict(params.get(GLOBAL) or hf.get("rope_scaling") or {})
    local = dict(params.get(LOCAL) or {})
    full.setdefault("rope_theta", hf.get("rope_theta", 1000000.0))
    local.setdefault("rope_theta", hf.get("rope_local_base_freq", 10000.0))
    out: dict[str, Any] = {
        "rope_theta": float(full["rope_theta"]),
        "local_rope_theta": float(local["rope_theta"]),
    }
    kinds = (full.get("rope_type", full.get("type", "default")), local.get("rope_type", "default"))
    if kinds[0] == "linear":
        out.update(rope_scaling="linear", rope_factor=float(full["factor"]))
    if kinds[0] not in ("default", "linear") or kinds[1] != "default":
        raise UnsupportedArchitectureError(
            f"{ARCHITECTURE} with rope types {kinds} (global, local): supported are default or "
            "linear (global) and default (local)"
        )
    return out


def config_from_hf(hf: dict) -> Gemma3Config:
    activation = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if activation != "gelu_pytorch_tanh":
        raise UnsupportedArchitectureError(f"{ARCHITECTURE} with hidden_activation={activation!r}")
    if hf.get("use_bidirectional_attention"):
        raise UnsupportedArchitectureError(f"{ARCHITECTURE} with use_bidirectional_attention")
    bias = bool(hf.get("attention_bias", False))
    return Gemma3Config(
        **sizes_from_hf(hf),
        n_kv_heads=hf["num_key_value_heads"],
        head_dim=hf["head_dim"],
        sliding_window=hf.get("sliding_window") or 0,
        global_every=global_every_of(hf),
        query_pre_attn_scalar=hf.get("query_pre_attn_scalar") or 0,
        final_logit_softcap=hf.get("final_logit_softcapping") or 0.0,
        tie_embeddings=hf.get("tie_word_embeddings", True),
        qkv_bias=bias,
        out_bias=bias,
        **rope_from_hf(hf),
    )


def config_to_hf(c: Gemma3Config) -> dict:
    if c.qkv_bias != c.out_bias or c.mlp_bias or not c.qk_norm or c.rope_scaling == "llama3":
        raise ModelError(
            f"qkv_bias={c.qkv_bias}, out_bias={c.out_bias}, mlp_bias={c.mlp_bias}, "
            f"qk_norm={c.qk_norm}, rope_scaling={c.rope_scaling!r} has no {ARCHITECTURE} "
            "equivalent"
        )
    full: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling == "linear":
        full.update(rope_type="linear", factor=c.rope_factor)
    window = c.sliding_window or c.max_seq_len  # no window: every layer global
    return {
        **sizes_to_hf(c),  # head_dim: Gemma 3's is never 0
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": {
            GLOBAL: full,
            LOCAL: {"rope_type": "default", "rope_theta": c.local_rope_theta},
        },
        "sliding_window": window,
        "layer_types": layer_types(c.n_layers, c.global_every if c.sliding_window else 1),
        "query_pre_attn_scalar": c.query_pre_attn_scalar or c.head_dim,
        "final_logit_softcapping": c.final_logit_softcap or None,
        "attn_logit_softcapping": None,
        "attention_bias": c.qkv_bias,
        "use_bidirectional_attention": False,
    }


# the sandwich block's four norms: the attention's (before, after), then the MLP's
NORMS = {
    "attn_norm": "input_layernorm",
    "post_attn_norm": "post_attention_layernorm",
    "mlp_norm": "pre_feedforward_layernorm",
    "post_mlp_norm": "post_feedforward_layernorm",
}


def rules(c: Gemma3Config) -> list[Rule]:
    return decoder_rules(c, norms=NORMS)
