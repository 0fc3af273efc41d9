"""Mixtral <-> transformers ``MixtralForCausalLM``: Mistral's attention, experts w1/w2/w3.

The experts live under ``block_sparse_moe`` (``gate`` is the router; ``w1`` the gate
projection, ``w3`` the up projection, ``w2`` the down projection), each of width
``intermediate_size``.
"""

from __future__ import annotations

from theseus.models.errors import ModelError
from theseus.models.hf_mapping import ParamPath, Rule, routed_experts
from theseus.models.llama.hf import decoder_from_hf, decoder_rules, decoder_to_hf
from theseus.models.mixtral.config import MixtralConfig

ARCHITECTURE = "MixtralForCausalLM"
MODEL_TYPE = "mixtral"
# not decided by config.json: transformers routes dropless; a capacity is a training choice
FREE_FIELDS = ("capacity_factor",)


def config_from_hf(hf: dict) -> MixtralConfig:
    kw = decoder_from_hf(hf, ARCHITECTURE)
    del kw["d_ff"]  # intermediate_size is the experts' width; there is no dense MLP
    return MixtralConfig(
        sliding_window=hf.get("sliding_window") or 0,
        n_experts=hf["num_local_experts"],
        n_experts_per_token=hf["num_experts_per_tok"],
        moe_d_ff=hf["intermediate_size"],
        router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.02),
        **kw,
    )


def config_to_hf(c: MixtralConfig) -> dict:
    if c.shared_expert_d_ff or not c.norm_topk_prob:
        raise ModelError(
            f"shared_expert_d_ff={c.shared_expert_d_ff}, norm_topk_prob={c.norm_topk_prob} has "
            f"no {ARCHITECTURE} equivalent (no shared expert, renormalised top-k weights)"
        )
    config = decoder_to_hf(
        c, ARCHITECTURE, biases=(False, False), qk_norm=False, sliding_window=True
    )
    return {
        **config,
        "intermediate_size": c.moe_d_ff,
        "sliding_window": c.sliding_window or None,
        "num_local_experts": c.n_experts,
        "num_experts_per_tok": c.n_experts_per_token,
        "router_aux_loss_coef": c.router_aux_loss_coef,
        "router_jitter_noise": 0.0,
    }


def expert_rules(c: MixtralConfig, ours: ParamPath, theirs: str) -> list[Rule]:
    """The router and the E experts' w1 (gate), w3 (up) and w2 (down), stacked here."""
    moe = theirs.removesuffix(".mlp") + ".block_sparse_moe"
    return routed_experts(ours, moe, c.n_experts, ("w1", "w3", "w2"))


def rules(c: MixtralConfig) -> list[Rule]:
    return decoder_rules(c, expert_rules)
