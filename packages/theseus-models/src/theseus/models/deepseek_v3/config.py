"""DeepSeek-V3 config and presets (cheap to import: no JAX).

Multi-token prediction (DeepSeek-V3's extra next-next-token module) is not part of the model:
it is a training objective and a speculative-decoding head, left out here.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.config import ModelConfig
from theseus.models.family import Family
from theseus.models.moe_fields import ExpertFields


@dataclass(unsafe_hash=True)
class DeepseekV3Config(ExpertFields, ModelConfig):
    d_ff: int = option(1024, "SwiGLU hidden width of the dense layers", ge=1)
    norm_eps: float = option(1e-6, "RMSNorm epsilon", gt=0)
    tie_embeddings: bool = option(False, "share the token embedding with the output head")
    # multi-head latent attention
    q_lora_rank: int = option(0, "width of the queries' latent; 0: queries straight from x", ge=0)
    kv_lora_rank: int = option(
        64, "width of the keys' and values' latent (what the cache keeps)", ge=1
    )
    qk_nope_dim: int = option(32, "per-head query/key width without positions", ge=1)
    qk_rope_dim: int = option(
        16, "per-head query/key width with RoPE (the rotary key is shared)", ge=2
    )
    v_head_dim: int = option(32, "per-head value width", ge=1)
    rope_theta: float = option(10000.0, "RoPE base frequency", gt=0)
    rope_interleave: bool = option(True, "RoPE rotates pairs (2i, 2i+1) (DeepSeek's layout)")
    rope_scaling: str = option("none", "RoPE scaling: 'none' or 'yarn'", choices=("none", "yarn"))
    rope_factor: float = option(40.0, "yarn: context extension factor", gt=0)
    rope_original_max_len: int = option(
        4096, "yarn: the context length trained before scaling", ge=1
    )
    rope_beta_fast: float = option(32.0, "yarn: rotations where extrapolation ends", gt=0)
    rope_beta_slow: float = option(1.0, "yarn: rotations where interpolation starts", gt=0)
    rope_mscale: float = option(1.0, "yarn: attention temperature coefficient (rotary part)", ge=0)
    rope_mscale_all_dim: float = option(
        0.0, "yarn: temperature coefficient of the whole softmax scale; 0 = none", ge=0
    )
    # experts
    first_dense_layers: int = option(1, "the first this many layers have a dense MLP", ge=0)
    moe_d_ff: int = option(64, "hidden width of each routed (and shared) expert", ge=1)
    n_shared_experts: int = option(1, "always-on experts of width moe_d_ff (fused into one)", ge=0)
    n_groups: int = option(1, "expert groups (nodes) for group-limited routing; 1 = none", ge=1)
    top_groups: int = option(1, "groups a token's experts may come from", ge=1)
    routed_scale: float = option(1.0, "routed experts' weights are multiplied by this", gt=0)
    bias_update_rate: float = option(
        0.001,
        "aux-loss-free balancing: each step moves an expert's routing bias by this, against "
        "its load (0 freezes the biases)",
        ge=0,
    )


PRESETS: dict[str, dict] = {
    "tiny": {
        "n_layers": 3,
        "d_model": 64,
        "n_heads": 4,
        "d_ff": 128,
        "q_lora_rank": 48,
        "kv_lora_rank": 32,
        "qk_nope_dim": 16,
        "qk_rope_dim": 8,
        "v_head_dim": 12,
        "first_dense_layers": 1,
        "n_experts": 8,
        "n_experts_per_token": 2,
        "moe_d_ff": 32,
        "n_shared_experts": 1,
        "n_groups": 4,
        "top_groups": 2,
        "routed_scale": 2.5,
    },
    # moonshotai/Moonlight-16B-A3B config.json (a DeepSeek-V3 architecture of
    # DeepSeek-V2-Lite's size)
    "moonlight-16b-a3b": {
        "vocab_size": 163840,
        "tie_embeddings": False,
        "n_layers": 27,
        "d_model": 2048,
        "n_heads": 16,
        "d_ff": 11264,
        "norm_eps": 1e-5,
        "q_lora_rank": 0,
        "kv_lora_rank": 512,
        "qk_nope_dim": 128,
        "qk_rope_dim": 64,
        "v_head_dim": 128,
        "rope_theta": 50000.0,
        "max_seq_len": 8192,
        "first_dense_layers": 1,
        "n_experts": 64,
        "n_experts_per_token": 6,
        "moe_d_ff": 1408,
        "n_shared_experts": 2,
        "n_groups": 1,
        "top_groups": 1,
        "routed_scale": 2.446,
    },
    # deepseek-ai/DeepSeek-V3 config.json (without its multi-token-prediction module)
    "671b": {
        "vocab_size": 129280,
        "tie_embeddings": False,
        "n_layers": 61,
        "norm_eps": 1e-6,
        "d_model": 7168,
        "n_heads": 128,
        "d_ff": 18432,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_dim": 128,
        "qk_rope_dim": 64,
        "v_head_dim": 128,
        "rope_theta": 10000.0,
        "rope_scaling": "yarn",
        "rope_factor": 40.0,
        "rope_original_max_len": 4096,
        "rope_beta_fast": 32.0,
        "rope_beta_slow": 1.0,
        "rope_mscale": 1.0,
        "rope_mscale_all_dim": 1.0,
        "max_seq_len": 163840,
        "first_dense_layers": 3,
        "n_experts": 256,
        "n_experts_per_token": 8,
        "moe_d_ff": 2048,
        "n_shared_experts": 1,
        "n_groups": 8,
        "top_groups": 4,
        "routed_scale": 2.5,
    },
}

FAMILY = Family.of_package(
    __name__,
    DeepseekV3Config,
    PRESETS,
    "DeepSeek-V3: MLA, shared + fine-grained routed experts, aux-loss-free balancing",
)
