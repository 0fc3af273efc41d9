"""Qwen3-MoE <-> transformers ``Qwen3MoeForCausalLM``: Qwen3's layout, experts as MLPs."""

from __future__ import annotations

from theseus.models.errors import UnsupportedArchitectureError
from theseus.models.hf_mapping import ParamPath, Rule, routed_experts
from theseus.models.llama.hf import decoder_from_hf, decoder_rules, decoder_to_hf
from theseus.models.qwen3_moe.config import Qwen3MoeConfig

ARCHITECTURE = "Qwen3MoeForCausalLM"
MODEL_TYPE = "qwen3_moe"
# not decided by config.json: transformers routes dropless; a capacity is a training choice
FREE_FIELDS = ("capacity_factor",)


def config_from_hf(hf: dict) -> Qwen3MoeConfig:
    kw = decoder_from_hf(hf, ARCHITECTURE)
    if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
        raise UnsupportedArchitectureError(
            f"{ARCHITECTURE} with dense layers (mlp_only_layers/sparse step)"
        )
    return Qwen3MoeConfig(
        qk_norm=True,
        n_experts=hf.get("num_experts") or hf["num_local_experts"],
        n_experts_per_token=hf["num_experts_per_tok"],
        moe_d_ff=hf["moe_intermediate_size"],
        norm_topk_prob=bool(hf.get("norm_topk_prob")),
        router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.001),
        **kw,
    )


def config_to_hf(c: Qwen3MoeConfig) -> dict:
    biases = (c.qkv_bias, c.qkv_bias)
    return {
        **decoder_to_hf(c, ARCHITECTURE, biases=biases, qk_norm=True),
        "attention_bias": c.qkv_bias,
        "num_experts": c.n_experts,
        "num_local_experts": c.n_experts,
        "num_experts_per_tok": c.n_experts_per_token,
        "moe_intermediate_size": c.moe_d_ff,
        "norm_topk_prob": c.norm_topk_prob,
        "router_aux_loss_coef": c.router_aux_loss_coef,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


def expert_rules(c: Qwen3MoeConfig, ours: ParamPath, theirs: str) -> list[Rule]:
    """The router and the E experts' gate, up and down projections, stacked here."""
    return routed_experts(ours, theirs, c.n_experts)


def rules(c: Qwen3MoeConfig) -> list[Rule]:
    return decoder_rules(c, expert_rules)
