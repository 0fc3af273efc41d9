"""Fixtures for model tests: tiny random theseus models and tiny random transformers checkpoints.

Parity tests are marked ``parity`` and skipped (with the reason) where torch/transformers are
not importable; the root conftest turns that skip into a failure when THESEUS_REQUIRE_PARITY=1.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

HAVE_PARITY = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
needs_parity = pytest.mark.skipif(
    not HAVE_PARITY,
    reason="torch and transformers (the `parity` dependency group) are not installed",
)

VOCAB = 97

# The shape most tiny models share: 2 layers, 32 wide, 4 query heads, 64 positions.
TINY_HF: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)
# The DeepSeek-V3 layout both of its tiny variants keep: one dense layer, then MoE layers of
# 8 routed experts 16 wide, 4 key/value heads, latent keys of rank 16.
TINY_DEEPSEEK: dict[str, Any] = dict(
    TINY_HF,
    moe_intermediate_size=16,
    num_key_value_heads=4,
    first_k_dense_replace=1,
    n_routed_experts=8,
    kv_lora_rank=16,
    qk_nope_head_dim=8,
    qk_rope_head_dim=8,
)
LLAMA3_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}

# name -> (transformers config class, kwargs): the tiny models the parity tests cover.
HF_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "gpt2-untied": (
        "GPT2Config",
        dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, tie_word_embeddings=False),
    ),
    "llama-gqa2": ("LlamaConfig", dict(TINY_HF, num_key_value_heads=2)),
    "llama3-mqa-tied": (
        "LlamaConfig",
        dict(
            TINY_HF,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            rope_parameters={**LLAMA3_ROPE, "original_max_position_embeddings": 16},
        ),
    ),
    "qwen2": ("Qwen2Config", dict(TINY_HF, num_key_value_heads=2)),
    "qwen3": (
        "Qwen3Config",
        dict(TINY_HF, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(
            TINY_HF,
            moe_intermediate_size=16,
            num_key_value_heads=2,
            head_dim=8,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
        ),
    ),
    # windows (4, 5) shorter than the 12-token batch; Mixtral's experts are intermediate_size wide
    "mistral": ("MistralConfig", dict(TINY_HF, num_key_value_heads=2, sliding_window=4)),
    "mixtral": (
        "MixtralConfig",
        dict(
            TINY_HF,
            intermediate_size=16,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=5,
        ),
    ),
    # local, global, local layers with their own RoPE (the global one linearly scaled), a
    # query scale other than 1/sqrt(head_dim), final soft-capping that bites (|logit| ~ 1)
    "gemma3": (
        "Gemma3TextConfig",
        dict(
            TINY_HF,
            num_hidden_layers=3,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=12,
            final_logit_softcapping=1.5,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
        ),
    ),
    # a dense layer, then MoE layers with a shared expert and 8 routed experts in 4 groups of
    # which 2 are searched; queries through their latent; YaRN RoPE, interleaved pairs
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            TINY_DEEPSEEK,
            num_hidden_layers=3,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
            q_lora_rank=24,
            v_head_dim=12,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        ),
    ),
    # Moonlight's variant: queries straight from x, no groups, two shared experts, plain RoPE
    "deepseek_v3-moonlight": (
        "DeepseekV3Config",
        dict(
            TINY_DEEPSEEK,
            num_experts_per_tok=3,
            n_shared_experts=2,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.446,
            q_lora_rank=None,
            v_head_dim=8,
            rope_parameters={"rope_type": "default", "rope_theta": 50000.0},
        ),
    ),
}


def build_hf(name: str, directory: Path) -> Path:
    """Save a random-initialised transformers model ``name`` (fp32) into ``directory``."""
    import torch
    import transformers

    cls_name, kwargs = HF_MODELS[name]
    config = getattr(transformers, cls_name)(
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0, **kwargs
    )
    torch.manual_seed(sum(map(ord, name)))
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # non-trivial norm gains and biases, so a swapped one shows
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
        for name_, buffer in model.named_buffers():  # DeepSeek's balancing biases: not zero
            if name_.endswith("e_score_correction_bias"):
                buffer.add_(0.1 * torch.randn_like(buffer))
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """``hf_checkpoint(name) -> Path``: a tiny transformers checkpoint, built once per session."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_hf(name, tmp_path_factory.mktemp(name.replace("_", "-")))
        return built[name]

    return get


def tiny(family: str, execution: Any = None, **overrides: Any) -> Any:
    """A tiny random theseus model of ``family`` (its ``tiny`` preset, vocab 97), built with
    ``execution`` (an ExecutionPlan; default none: the plainest choices)."""
    from flax import nnx
    from theseus.models.families import family_named

    spec = family_named(family)
    values = {**spec.presets["tiny"], "vocab_size": VOCAB, "max_seq_len": 64, **overrides}
    config = spec.config(preset="tiny", **values)
    return spec.load_model()(config, rngs=nnx.Rngs(params=0), execution=execution)
