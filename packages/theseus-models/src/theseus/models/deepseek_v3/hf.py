"""DeepSeek-V3 <-> transformers ``DeepseekV3ForCausalLM``: MLA, dense then MoE layers.

Attention: ``q_proj`` (or ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``),
``kv_a_proj_with_mqa`` (the latent and the rotary key side by side), ``kv_a_layernorm``,
``kv_b_proj`` (each head's position-free key then its value), ``o_proj``. MoE layers:
``mlp.gate`` (the router; its ``e_score_correction_bias`` is the balancing bias),
``mlp.experts.N`` and ``mlp.shared_experts`` (the shared experts fused into one SwiGLU).
The multi-token-prediction layer of a checkpoint (``model.layers.<n_layers>``) is not read.
"""

from __future__ import annotations

import re
from typing import Any

from theseus.models.deepseek_v3.config import DeepseekV3Config
from theseus.models.errors import ModelError, UnsupportedArchitectureError
from theseus.models.hf_mapping import ParamPath, Rule, routed_experts, same, torch_linear
from theseus.models.llama.hf import decoder_rules, sizes_from_hf, swiglu_rules

ARCHITECTURE = "DeepseekV3ForCausalLM"
MODEL_TYPE = "deepseek_v3"
# not decided by config.json: the balancing rate and a capacity are training choices
FREE_FIELDS = ("capacity_factor", "bias_update_rate")
YARN_KEYS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow")


def rope_from_hf(hf: dict) -> dict[str, Any]:
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    rope.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    out: dict[str, Any] = {"rope_theta": float(rope["rope_theta"])}
    if kind == "default":
        return out
    if kind != "yarn" or rope.get("attention_factor") or rope.get("truncate") is False:
        raise UnsupportedArchitectureError(
            f"{ARCHITECTURE} with rope_parameters={rope} (supported: default, yarn)"
        )
    return out | dict(
        rope_scaling="yarn",
        rope_factor=float(rope["factor"]),
        rope_original_max_len=int(rope["original_max_position_embeddings"]),
        rope_beta_fast=float(rope.get("beta_fast") or 32.0),
        rope_beta_slow=float(rope.get("beta_slow") or 1.0),
        rope_mscale=float(rope.get("mscale") or 0.0),
        rope_mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0),
    )


def config_from_hf(hf: dict) -> DeepseekV3Config:
    if hf.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(f"{ARCHITECTURE} with hidden_act={hf['hidden_act']!r}")
    if hf.get("attention_bias") or hf.get("moe_layer_freq", 1) != 1:
        raise UnsupportedArchitectureError(
            f"{ARCHITECTURE} with attention_bias={hf.get('attention_bias')}, "
            f"moe_layer_freq={hf.get('moe_layer_freq')} (supported: no biases, every layer "
            "after the dense ones MoE)"
        )
    return DeepseekV3Config(
        **sizes_from_hf(hf),
        tie_embeddings=hf.get("tie_word_embeddings", False),
        q_lora_rank=hf.get("q_lora_rank") or 0,
        kv_lora_rank=hf["kv_lora_rank"],
        qk_nope_dim=hf["qk_nope_head_dim"],
        qk_rope_dim=hf["qk_rope_head_dim"],
        v_head_dim=hf["v_head_dim"],
        rope_interleave=bool(hf.get("rope_interleave", True)),
        first_dense_layers=hf.get("first_k_dense_replace") or 0,
        n_experts=hf["n_routed_experts"],
        n_experts_per_token=hf["num_experts_per_tok"],
        moe_d_ff=hf["moe_intermediate_size"],
        n_shared_experts=hf.get("n_shared_experts") or 0,
        n_groups=hf.get("n_group") or 1,
        top_groups=hf.get("topk_group") or 1,
        routed_scale=float(hf.get("routed_scaling_factor", 1.0)),
        norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
        **rope_from_hf(hf),
    )


def config_to_hf(c: DeepseekV3Config) -> dict:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling == "yarn":
        rope.update(
            rope_type="yarn",
            factor=c.rope_factor,
            original_max_position_embeddings=c.rope_original_max_len,
            beta_fast=c.rope_beta_fast,
            beta_slow=c.rope_beta_slow,
            mscale=c.rope_mscale,
            mscale_all_dim=c.rope_mscale_all_dim,
        )
    if c.rope_scaling not in ("none", "yarn"):
        raise ModelError(f"rope_scaling={c.rope_scaling!r} has no {ARCHITECTURE} equivalent")
    return {
        "hidden_size": c.d_model,
        "intermediate_size": c.d_ff,
        "moe_intermediate_size": c.moe_d_ff,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": rope,
        "rope_interleave": c.rope_interleave,
        "q_lora_rank": c.q_lora_rank or None,
        "kv_lora_rank": c.kv_lora_rank,
        "qk_nope_head_dim": c.qk_nope_dim,
        "qk_rope_head_dim": c.qk_rope_dim,
        "v_head_dim": c.v_head_dim,
        "first_k_dense_replace": c.first_dense_layers,
        "n_routed_experts": c.n_experts,
        "num_experts_per_tok": c.n_experts_per_token,
        "n_shared_experts": c.n_shared_experts,
        "n_group": c.n_groups,
        "topk_group": c.top_groups,
        "routed_scaling_factor": c.routed_scale,
        "norm_topk_prob": c.norm_topk_prob,
        "attention_bias": False,
        "num_nextn_predict_layers": 0,
    }


def attention_rules(c: DeepseekV3Config, att: ParamPath, hatt: str) -> list[Rule]:
    out = [
        torch_linear((*att, "kv_a_proj", "kernel"), f"{hatt}.kv_a_proj_with_mqa.weight", 1),
        same((*att, "kv_a_norm", "scale"), f"{hatt}.kv_a_layernorm.weight"),
        torch_linear((*att, "kv_b_proj", "kernel"), f"{hatt}.kv_b_proj.weight", 1),
        torch_linear((*att, "o_proj", "kernel"), f"{hatt}.o_proj.weight", 2),
    ]
    if not c.q_lora_rank:
        return [torch_linear((*att, "q_proj", "kernel"), f"{hatt}.q_proj.weight", 1), *out]
    return [
        torch_linear((*att, "q_a_proj", "kernel"), f"{hatt}.q_a_proj.weight", 1),
        same((*att, "q_a_norm", "scale"), f"{hatt}.q_a_layernorm.weight"),
        torch_linear((*att, "q_b_proj", "kernel"), f"{hatt}.q_b_proj.weight", 1),
        *out,
    ]


def moe_rules(c: DeepseekV3Config, ours: ParamPath, theirs: str) -> list[Rule]:
    out = routed_experts(ours, theirs, c.n_experts)
    out.append(same((*ours, "router_bias"), f"{theirs}.gate.e_score_correction_bias"))
    if c.n_shared_experts:
        out += swiglu_rules(c, (*ours, "shared_expert"), f"{theirs}.shared_experts")
    return out


MTP_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def IGNORED(c: DeepseekV3Config, key: str) -> bool:  # noqa: N802  (the hf modules' protocol)
    """The multi-token-prediction layers (``model.layers.<n_layers + i>``), not read."""
    found = MTP_LAYER.match(key)
    return found is not None and int(found.group(1)) >= c.n_layers


def mlp_rules(c: DeepseekV3Config, ours: ParamPath, theirs: str) -> list[Rule]:
    """Block ``ours[1]``'s MLP (``decoder_rules`` passes ``("blocks", i, "mlp")``): dense in
    the first ``first_dense_layers`` blocks, experts after."""
    dense = int(ours[1]) < c.first_dense_layers
    return (swiglu_rules if dense else moe_rules)(c, ours, theirs)


def rules(c: DeepseekV3Config) -> list[Rule]:
    return decoder_rules(c, mlp_rules, attention=attention_rules)
