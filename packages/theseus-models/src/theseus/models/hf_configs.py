"""Hugging Face config.json <-> theseus configs, for the architectures theseus supports.

Cheap to import (no JAX): ``config_from_hf`` refuses what we cannot run, naming it.
"""

from __future__ import annotations

from typing import Any

from theseus.models import configs as C
from theseus.models.errors import ModelError, UnsupportedArchitectureError

ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt",
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
FAMILY_ARCH = {family: arch for arch, family in ARCHITECTURES.items()}
MODEL_TYPES = {
    "gpt": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
}

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _rope_from_hf(hf: dict, arch: str) -> dict:
    rope = dict(hf.get("rope_parameters") or {})
    if not rope:  # transformers 4.x keeps them at the top level
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


def config_from_hf(hf: dict) -> tuple[str, Any]:
    """(family, theseus config) of a transformers ``config.json``; refuses what we cannot run."""
    arch = (hf.get("architectures") or [hf.get("model_type", "?")])[0]
    if arch not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"Hugging Face architecture {arch!r} is not supported; supported: "
            + ", ".join(sorted(ARCHITECTURES))
        )
    family = ARCHITECTURES[arch]
    if family == "gpt":
        if (
            hf.get("activation_function", "gelu_new") != "gelu_new"
            or hf.get("scale_attn_by_inverse_layer_idx")
            or not hf.get("scale_attn_weights", True)
        ):
            raise UnsupportedArchitectureError(f"{arch}: only GPT-2's gelu_new/scaled attention")
        d = hf["n_embd"]
        return family, C.GPTConfig(
            vocab_size=hf["vocab_size"],
            max_seq_len=hf["n_positions"],
            n_layers=hf["n_layer"],
            d_model=d,
            n_heads=hf["n_head"],
            d_ff=hf.get("n_inner") or 4 * d,
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            tie_embeddings=hf.get("tie_word_embeddings", True),
            init_std=hf.get("initializer_range", 0.02),
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(f"{arch} with hidden_act={hf['hidden_act']!r}")
    if hf.get("use_sliding_window"):
        raise UnsupportedArchitectureError(
            f"{arch} with use_sliding_window=true (per-layer windows)"
        )
    n_heads = hf["num_attention_heads"]
    bias = bool(hf.get("attention_bias", False))
    kw: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"],
        max_seq_len=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"],
        d_model=hf["hidden_size"],
        n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        d_ff=hf["intermediate_size"],
        norm_eps=hf["rms_norm_eps"],
        tie_embeddings=hf.get("tie_word_embeddings", False),
        init_std=hf.get("initializer_range", 0.02),
        qkv_bias=bias,
        out_bias=bias,
        **_rope_from_hf(hf, arch),
    )
    if family == "llama":
        return family, C.LlamaConfig(mlp_bias=bool(hf.get("mlp_bias", False)), **kw)
    if family == "qwen2":
        return family, C.Qwen2Config(**{**kw, "qkv_bias": True, "out_bias": False})
    if family == "qwen3":
        return family, C.Qwen3Config(qk_norm=True, **kw)
    if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
        raise UnsupportedArchitectureError(
            f"{arch} with dense layers (mlp_only_layers/sparse step)"
        )
    return family, C.Qwen3MoeConfig(
        qk_norm=True,
        n_experts=hf.get("num_experts") or hf["num_local_experts"],
        n_experts_per_token=hf["num_experts_per_tok"],
        moe_d_ff=hf["moe_intermediate_size"],
        norm_topk_prob=bool(hf.get("norm_topk_prob")),
        router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.001),
        **kw,
    )


def config_to_hf(family: str, c: Any) -> dict:
    """A ``config.json`` transformers builds the same model from."""
    base = {
        "architectures": [FAMILY_ARCH[family]],
        "model_type": MODEL_TYPES[family],
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": c.tie_embeddings,
        "initializer_range": c.init_std,
        "dtype": "float32",
    }
    if family == "gpt":
        if c.positions != "learned" or not c.bias:
            raise ModelError(
                "only GPT-2 proper (learned positions, biases) exports to transformers"
            )
        return {
            **base,
            "n_embd": c.d_model,
            "n_layer": c.n_layers,
            "n_head": c.n_heads,
            "n_positions": c.max_seq_len,
            "n_inner": c.d_ff or 4 * c.d_model,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": c.norm_eps,
        }
    if c.sliding_window:
        raise ModelError(
            f"sliding_window={c.sliding_window} has no {FAMILY_ARCH[family]} equivalent"
        )
    expected = {"llama": (c.qkv_bias, c.qkv_bias), "qwen2": (True, False)}.get(
        family, (c.qkv_bias, c.qkv_bias)
    )
    if (c.qkv_bias, c.out_bias) != expected or c.qk_norm != family.startswith("qwen3"):
        raise ModelError(
            f"this {family} config (biases/q-k norm) has no {FAMILY_ARCH[family]} equivalent"
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
    out = {
        **base,
        "hidden_size": c.d_model,
        "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads or c.n_heads,
        "head_dim": c.head_dim or c.d_model // c.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": rope,
        "rope_theta": c.rope_theta,
        "rope_scaling": rope if c.rope_scaling == "llama3" else None,
    }
    if family in ("llama", "qwen3", "qwen3_moe"):
        out["attention_bias"] = c.qkv_bias
    if family == "llama":
        out["mlp_bias"] = c.mlp_bias
    if family == "qwen3_moe":
        out.update(
            num_experts=c.n_experts,
            num_local_experts=c.n_experts,
            num_experts_per_tok=c.n_experts_per_token,
            moe_intermediate_size=c.moe_d_ff,
            norm_topk_prob=c.norm_topk_prob,
            router_aux_loss_coef=c.router_aux_loss_coef,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return out
