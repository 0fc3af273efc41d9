"""GPT <-> transformers ``GPT2LMHeadModel``: config keys and tensor rules."""

from __future__ import annotations

from theseus.models.errors import ModelError, UnsupportedArchitectureError
from theseus.models.gpt.config import GPTConfig
from theseus.models.hf_mapping import ParamPath, Rule, conv1d, fused_qkv, same, torch_linear

ARCHITECTURE = "GPT2LMHeadModel"
MODEL_TYPE = "gpt2"


def config_from_hf(hf: dict) -> GPTConfig:
    if (
        hf.get("activation_function", "gelu_new") != "gelu_new"
        or hf.get("scale_attn_by_inverse_layer_idx")
        or not hf.get("scale_attn_weights", True)
    ):
        raise UnsupportedArchitectureError(
            f"{ARCHITECTURE}: only GPT-2's gelu_new/scaled attention"
        )
    d = hf["n_embd"]
    return GPTConfig(
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


def config_to_hf(c: GPTConfig) -> dict:
    if c.positions != "learned" or not c.bias:
        raise ModelError("only GPT-2 proper (learned positions, biases) exports to transformers")
    return {
        "n_embd": c.d_model,
        "n_layer": c.n_layers,
        "n_head": c.n_heads,
        "n_positions": c.max_seq_len,
        "n_inner": c.d_ff or 4 * c.d_model,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": c.norm_eps,
    }


def qkv_paths(att: ParamPath, leaf: str) -> tuple[ParamPath, ParamPath, ParamPath]:
    """``leaf`` (kernel, bias) of the query, key and value projections of attention ``att``."""
    q, k, v = ((*att, f"{p}_proj", leaf) for p in "qkv")
    return q, k, v


def rules(c: GPTConfig) -> list[Rule]:
    t = "transformer"
    out = [
        same(("embed", "embedding"), f"{t}.wte.weight"),
        same(("wpe", "embedding"), f"{t}.wpe.weight"),
        same(("final_norm", "scale"), f"{t}.ln_f.weight"),
        same(("final_norm", "bias"), f"{t}.ln_f.bias"),
    ]
    for i in range(c.n_layers):
        b, h = ("blocks", i), f"{t}.h.{i}"
        att = (*b, "attention")
        out += [
            same((*b, "attn_norm", "scale"), f"{h}.ln_1.weight"),
            same((*b, "attn_norm", "bias"), f"{h}.ln_1.bias"),
            fused_qkv(qkv_paths(att, "kernel"), f"{h}.attn.c_attn.weight", 1),
            fused_qkv(qkv_paths(att, "bias"), f"{h}.attn.c_attn.bias", 0),
            conv1d((*att, "o_proj", "kernel"), f"{h}.attn.c_proj.weight", 2),
            same((*att, "o_proj", "bias"), f"{h}.attn.c_proj.bias"),
            same((*b, "mlp_norm", "scale"), f"{h}.ln_2.weight"),
            same((*b, "mlp_norm", "bias"), f"{h}.ln_2.bias"),
            conv1d((*b, "mlp", "up_proj", "kernel"), f"{h}.mlp.c_fc.weight", 1),
            same((*b, "mlp", "up_proj", "bias"), f"{h}.mlp.c_fc.bias"),
            conv1d((*b, "mlp", "down_proj", "kernel"), f"{h}.mlp.c_proj.weight", 1),
            same((*b, "mlp", "down_proj", "bias"), f"{h}.mlp.c_proj.bias"),
        ]
    if not c.tie_embeddings:
        out.append(torch_linear(("lm_head", "kernel"), "lm_head.weight", 1))
    return out
