"""Config schemas of the model families (cheap to import: no JAX, no torch).

Each family's config is a dataclass whose defaults are a small model for a quick CPU run;
``PRESETS[family]`` holds the named sizes the config tree applies for ``model.preset=NAME``.
"""

from dataclasses import dataclass

from theseus.core.components import option


@dataclass(unsafe_hash=True)
class ModelConfig:
    """Fields every family has (the trainer relies on the first four).

    Hashable (``unsafe_hash``) so a model's graphdef can be a static argument of ``jax.jit``.
    """

    preset: str = option("", "size preset applied (see `theseus jobs`); '' for none")
    vocab_size: int = option(0, "vocabulary size; 0 takes it from the tokenized data")
    max_seq_len: int = option(256, "longest sequence the model accepts (positions)")
    dtype: str = option(
        "float32", "compute dtype (params stay float32; softmax and loss in float32)"
    )
    n_layers: int = option(6, "number of transformer blocks")
    d_model: int = option(384, "width of the residual stream")
    n_heads: int = option(6, "number of query heads")
    init_std: float = option(0.02, "standard deviation of the normal weight init")


@dataclass(unsafe_hash=True)
class GPTConfig(ModelConfig):
    d_ff: int = option(0, "MLP hidden width; 0 means 4 * d_model")
    positions: str = option("learned", "position encoding: 'learned' (GPT-2) or 'rope'")
    rope_theta: float = option(10000.0, "RoPE base when positions='rope'")
    norm_eps: float = option(1e-5, "LayerNorm epsilon")
    bias: bool = option(True, "biases in linear layers and LayerNorms")
    tie_embeddings: bool = option(True, "share the token embedding with the output head")


@dataclass(unsafe_hash=True)
class LlamaConfig(ModelConfig):
    n_kv_heads: int = option(2, "key/value heads (GQA); must divide n_heads; 1 is MQA")
    head_dim: int = option(0, "width of one head; 0 means d_model // n_heads")
    d_ff: int = option(1024, "SwiGLU hidden width")
    norm_eps: float = option(1e-5, "RMSNorm epsilon")
    rope_theta: float = option(10000.0, "RoPE base frequency")
    rope_scaling: str = option("none", "RoPE frequency scaling: 'none' or 'llama3'")
    rope_factor: float = option(8.0, "llama3 scaling: factor")
    rope_low_freq_factor: float = option(1.0, "llama3 scaling: low frequency factor")
    rope_high_freq_factor: float = option(4.0, "llama3 scaling: high frequency factor")
    rope_original_max_len: int = option(8192, "llama3 scaling: original context length")
    qkv_bias: bool = option(False, "biases on the q, k and v projections")
    out_bias: bool = option(False, "bias on the attention output projection")
    mlp_bias: bool = option(False, "biases in the MLP")
    qk_norm: bool = option(False, "RMSNorm on queries and keys per head (Qwen3)")
    sliding_window: int = option(0, "attend to at most this many previous tokens; 0 = no limit")
    tie_embeddings: bool = option(False, "share the token embedding with the output head")


@dataclass(unsafe_hash=True)
class Qwen2Config(LlamaConfig):
    norm_eps: float = option(1e-6, "RMSNorm epsilon")
    rope_theta: float = option(1000000.0, "RoPE base frequency")
    qkv_bias: bool = option(True, "biases on the q, k and v projections")


@dataclass(unsafe_hash=True)
class Qwen3Config(LlamaConfig):
    norm_eps: float = option(1e-6, "RMSNorm epsilon")
    rope_theta: float = option(1000000.0, "RoPE base frequency")
    head_dim: int = option(64, "width of one head (Qwen3 sets it independently of d_model)")
    qk_norm: bool = option(True, "RMSNorm on queries and keys per head")


@dataclass(unsafe_hash=True)
class Qwen3MoeConfig(Qwen3Config):
    n_experts: int = option(8, "number of routed experts")
    n_experts_per_token: int = option(2, "experts each token is routed to (top-k)")
    moe_d_ff: int = option(256, "hidden width of each expert")
    norm_topk_prob: bool = option(True, "renormalise the top-k router probabilities to sum to 1")
    router_aux_loss_coef: float = option(0.001, "weight of the load-balancing loss")
    shared_expert_d_ff: int = option(0, "hidden width of an always-on shared expert; 0 = none")
    capacity_factor: float = option(
        0.0, "expert capacity = factor * tokens * k / experts; 0 = dropless"
    )


PRESETS: dict[str, dict[str, dict]] = {
    "gpt": {
        "tiny": {"n_layers": 2, "d_model": 64, "n_heads": 4, "max_seq_len": 128},
        "124m": {"n_layers": 12, "d_model": 768, "n_heads": 12, "max_seq_len": 1024},
        "350m": {"n_layers": 24, "d_model": 1024, "n_heads": 16, "max_seq_len": 1024},
        "774m": {"n_layers": 36, "d_model": 1280, "n_heads": 20, "max_seq_len": 1024},
    },
    "llama": {
        "tiny": {"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 128},
        "1b": {
            "n_layers": 16,
            "d_model": 2048,
            "n_heads": 32,
            "n_kv_heads": 8,
            "head_dim": 64,
            "d_ff": 8192,
            "rope_theta": 500000.0,
            "rope_scaling": "llama3",
            "rope_factor": 32.0,
            "max_seq_len": 131072,
            "tie_embeddings": True,
            "norm_eps": 1e-5,
        },
        "8b": {
            "n_layers": 32,
            "d_model": 4096,
            "n_heads": 32,
            "n_kv_heads": 8,
            "head_dim": 128,
            "d_ff": 14336,
            "rope_theta": 500000.0,
            "rope_scaling": "llama3",
            "rope_factor": 8.0,
            "max_seq_len": 131072,
            "norm_eps": 1e-5,
        },
    },
    "qwen2": {
        "tiny": {"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "d_ff": 128},
        "0.5b": {
            "n_layers": 24,
            "d_model": 896,
            "n_heads": 14,
            "n_kv_heads": 2,
            "d_ff": 4864,
            "max_seq_len": 32768,
            "tie_embeddings": True,
        },
        "7b": {
            "n_layers": 28,
            "d_model": 3584,
            "n_heads": 28,
            "n_kv_heads": 4,
            "d_ff": 18944,
            "max_seq_len": 32768,
        },
    },
    "qwen3": {
        "tiny": {
            "n_layers": 2,
            "d_model": 64,
            "n_heads": 4,
            "n_kv_heads": 2,
            "head_dim": 16,
            "d_ff": 128,
        },
        "0.6b": {
            "n_layers": 28,
            "d_model": 1024,
            "n_heads": 16,
            "n_kv_heads": 8,
            "head_dim": 128,
            "d_ff": 3072,
            "max_seq_len": 40960,
            "tie_embeddings": True,
        },
        "8b": {
            "n_layers": 36,
            "d_model": 4096,
            "n_heads": 32,
            "n_kv_heads": 8,
            "head_dim": 128,
            "d_ff": 12288,
            "max_seq_len": 40960,
        },
    },
    "qwen3_moe": {
        "tiny": {
            "n_layers": 2,
            "d_model": 64,
            "n_heads": 4,
            "n_kv_heads": 2,
            "head_dim": 16,
            "n_experts": 4,
            "n_experts_per_token": 2,
            "moe_d_ff": 32,
        },
        "30b-a3b": {
            "n_layers": 48,
            "d_model": 2048,
            "n_heads": 32,
            "n_kv_heads": 4,
            "head_dim": 128,
            "n_experts": 128,
            "n_experts_per_token": 8,
            "moe_d_ff": 768,
            "max_seq_len": 40960,
        },
    },
}

FAMILIES: dict[str, tuple[type, str, str]] = {
    "gpt": (GPTConfig, "theseus.models.gpt:GPT", "GPT-2: learned positions, LayerNorm, GELU, tied"),
    "llama": (LlamaConfig, "theseus.models.llama:Llama", "Llama 2/3: RMSNorm, SwiGLU, GQA, RoPE"),
    "qwen2": (Qwen2Config, "theseus.models.qwen:Qwen2", "Qwen2: Llama with q/k/v biases"),
    "qwen3": (Qwen3Config, "theseus.models.qwen:Qwen3", "Qwen3: Llama with q/k RMSNorm"),
    "qwen3_moe": (
        Qwen3MoeConfig,
        "theseus.models.qwen3_moe:Qwen3Moe",
        "Qwen3-MoE: Qwen3 attention, top-k routed SwiGLU experts",
    ),
}
