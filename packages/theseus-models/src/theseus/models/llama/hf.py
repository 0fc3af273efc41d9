"""Llama <-> transformers ``LlamaForCausalLM``: config keys and tensor rules.

The Qwen families share this layout (``model.layers.N.self_attn.q_proj``, RMSNorm, RoPE
keys): their ``hf.py`` reuse ``decoder_from_hf``, ``decoder_to_hf`` and ``decoder_rules``
and add their few differences. Gemma 3 and DeepSeek-V3 reuse ``sizes_from_hf`` and
``decoder_rules`` (with their own norms, attention or MLPs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from theseus.models.errors import ModelError, UnsupportedArchitectureError
from theseus.models.hf_mapping import ParamPath, Rule, flat, same, torch_linear
from theseus.models.llama.config import LlamaConfig

ARCHITECTURE = "LlamaForCausalLM"
MODEL_TYPE = "llama"

# ---------------------------------------------------------------------------- shared


def rope_from_hf(hf: dict, arch: str) -> dict[str, Any]:
    """The RoPE fields of a config (``rope_parameters``, or transformers 4.x's top level)."""
    rope = dict(hf.get("rope_parameters") or {})
    if not rope:
        rope = dict(hf.get("rope_scaling") or {})
        rope.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    out: dict[str, Any] = {"rope_theta": float(rope.get("rope_theta", 10000.0))}
    if kind == "llama3":
        out.update(
            rope_scaling="llama3",
            rope_factor=float(rope["factor"]),
            rope_low_freq_factor=float(rope["low_freq_factor"]),
            rope_high_freq_factor=float(rope["high_freq_factor"]),
            rope_original_max_len=int(rope["original_max_position_embeddings"]),
        )
    elif kind != "default":
        raise UnsupportedArchitectureError(
            f"{arch} with rope_type={kind!r} is not supported (supported: default, llama3)"
        )
    return out


def decoder_from_hf(hf: dict, arch: str) -> dict[str, Any]:
    """Config fields every Llama-style family reads the same way; refuses what none runs."""
    if hf.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(f"{arch} with hidden_act={hf['hidden_act']!r}")
    if hf.get("use_sliding_window"):
        raise UnsupportedArchitectureError(
            f"{arch} with use_sliding_window=true (per-layer windows)"
        )
    n_heads = hf["num_attention_heads"]
    bias = bool(hf.get("attention_bias", False))
    return dict(
        **sizes_from_hf(hf),
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        tie_embeddings=hf.get("tie_word_embeddings", False),
        qkv_bias=bias,
        out_bias=bias,
        **rope_from_hf(hf, arch),
    )


def sizes_from_hf(hf: dict) -> dict[str, Any]:
    """The fields every RMSNorm decoder's ``config.json`` names alike (Gemma 3's and
    DeepSeek-V3's too): vocabulary, context, depth, widths, norm epsilon, init."""
    return dict(
        vocab_size=hf["vocab_size"],
        max_seq_len=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        norm_eps=hf["rms_norm_eps"],
        init_std=hf.get("initializer_range", 0.02),
    )


def decoder_to_hf(
    c: LlamaConfig,
    arch: str,
    *,
    biases: tuple[bool, bool],
    qk_norm: bool,
    sliding_window: bool = False,
) -> dict[str, Any]:
    """The shared ``config.json`` keys; ``biases`` (q/k/v, output), ``qk_norm`` and
    ``sliding_window`` (whether it has one) are what the architecture ``arch`` can express,
    anything else is refused."""
    if c.sliding_window and not sliding_window:
        raise ModelError(f"sliding_window={c.sliding_window} has no {arch} equivalent")
    if (c.qkv_bias, c.out_bias) != biases or c.qk_norm != qk_norm:
        raise ModelError(
            f"qkv_bias={c.qkv_bias}, out_bias={c.out_bias}, qk_norm={c.qk_norm} has no "
            f"{arch} equivalent"
        )
    rope: dict[str, Any] = {"rope_theta": c.rope_theta, "rope_type": "default"}
    if c.rope_scaling == "llama3":
        rope.update(
            rope_type="llama3",
            factor=c.rope_factor,
            low_freq_factor=c.rope_low_freq_factor,
            high_freq_factor=c.rope_high_freq_factor,
            original_max_position_embeddings=c.rope_original_max_len,
        )
    return {
        **sizes_to_hf(c),
        "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": rope,
        "rope_theta": c.rope_theta,
        "rope_scaling": rope if c.rope_scaling == "llama3" else None,
    }


def sizes_to_hf(c: Any) -> dict[str, Any]:
    """The widths and depth of a grouped-query decoder as ``config.json`` names them (Gemma
    3's too); ``head_dim`` 0 means ``d_model // n_heads``."""
    return {
        "hidden_size": c.d_model,
        "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads or c.n_heads,
        "head_dim": c.head_dim or c.d_model // c.n_heads,
    }


# a sublayer's rules: (config, our module's path, its transformers name) -> rules
SublayerRules = Callable[[Any, ParamPath, str], list[Rule]]


def swiglu_rules(c: object, ours: ParamPath, theirs: str) -> list[Rule]:
    """A dense SwiGLU MLP: gate, up and down projections (and biases when ``mlp_bias``)."""
    out = []
    for p in ("gate", "up", "down"):
        out.append(torch_linear((*ours, f"{p}_proj", "kernel"), f"{theirs}.{p}_proj.weight", 1))
        if getattr(c, "mlp_bias", False):
            out.append(same((*ours, f"{p}_proj", "bias"), f"{theirs}.{p}_proj.bias"))
    return out


def attention_rules(c: LlamaConfig, att: ParamPath, hatt: str) -> list[Rule]:
    """q, k, v and o projections (biases and q/k norms as configured)."""
    out = [torch_linear((*att, "o_proj", "kernel"), f"{hatt}.o_proj.weight", 2)]
    for p in "qkv":
        out.append(torch_linear((*att, f"{p}_proj", "kernel"), f"{hatt}.{p}_proj.weight", 1))
        if c.qkv_bias:
            out.append(flat((*att, f"{p}_proj", "bias"), f"{hatt}.{p}_proj.bias"))
    if c.out_bias:
        out.append(same((*att, "o_proj", "bias"), f"{hatt}.o_proj.bias"))
    if c.qk_norm:
        out += [
            same((*att, "q_norm", "scale"), f"{hatt}.q_norm.weight"),
            same((*att, "k_norm", "scale"), f"{hatt}.k_norm.weight"),
        ]
    return out


# our names of a block's norms -> transformers' (Llama's pre-norm block; Gemma 3 has four)
NORMS = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}


def decoder_rules(
    c: Any,
    mlp_rules: SublayerRules = swiglu_rules,
    *,
    attention: SublayerRules = attention_rules,
    norms: dict[str, str] = NORMS,
) -> list[Rule]:
    """Embedding, each block's ``norms``, attention (default ``attention_rules``: biases
    and q/k norms as configured) and MLP (``mlp_rules`` of ``("blocks", i, "mlp")``), the
    final norm and the head: the layout of every ``model.layers.N`` family."""
    out = [
        same(("embed", "embedding"), "model.embed_tokens.weight"),
        same(("final_norm", "scale"), "model.norm.weight"),
    ]
    for i in range(c.n_layers):
        b, h = ("blocks", i), f"model.layers.{i}"
        out += [same((*b, ours, "scale"), f"{h}.{theirs}.weight") for ours, theirs in norms.items()]
        out += attention(c, (*b, "attention"), f"{h}.self_attn")
        out += mlp_rules(c, (*b, "mlp"), f"{h}.mlp")
    if not c.tie_embeddings:
        out.append(torch_linear(("lm_head", "kernel"), "lm_head.weight", 1))
    return out


# ---------------------------------------------------------------------------- Llama


def config_from_hf(hf: dict) -> LlamaConfig:
    return LlamaConfig(
        mlp_bias=bool(hf.get("mlp_bias", False)), **decoder_from_hf(hf, ARCHITECTURE)
    )


def config_to_hf(c: LlamaConfig) -> dict:
    return {
        **decoder_to_hf(c, ARCHITECTURE, biases=(c.qkv_bias, c.qkv_bias), qk_norm=False),
        "attention_bias": c.qkv_bias,
        "mlp_bias": c.mlp_bias,
    }


def rules(c: LlamaConfig) -> list[Rule]:
    return decoder_rules(c)
