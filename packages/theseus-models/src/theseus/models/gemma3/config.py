"""Gemma 3 (text) config (Llama's fields, Gemma's defaults and additions) and presets. No JAX.

Layer i is global (full attention, ``rope_theta``, optionally linear RoPE scaling) when
``(i + 1) % global_every == 0``, else local (``sliding_window``, ``local_rope_theta``).
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.models.family import Family
from theseus.models.llama.config import LlamaConfig


@dataclass(unsafe_hash=True)
class Gemma3Config(LlamaConfig):
    n_kv_heads: int = option(1, "key/value heads (GQA); must divide n_heads; 1 is MQA", ge=1)
    head_dim: int = option(256, "width of one head (set independently of d_model)", ge=1)
    norm_eps: float = option(1e-6, "RMSNorm epsilon", gt=0)
    rope_theta: float = option(1000000.0, "RoPE base frequency of the global layers", gt=0)
    rope_scaling: str = option(
        "none", "RoPE scaling of the global layers: 'none' or 'linear'", choices=("none", "linear")
    )
    rope_factor: float = option(8.0, "linear scaling: positions divided by this factor", gt=0)
    local_rope_theta: float = option(10000.0, "RoPE base frequency of the local layers", gt=0)
    sliding_window: int = option(
        512, "window of the local layers (the token itself included)", ge=1
    )
    global_every: int = option(
        6, "every this many layers one is global (the last of each run)", ge=1
    )
    query_pre_attn_scalar: int = option(
        0, "scores are scaled by 1 / sqrt(this); 0 means head_dim", ge=0
    )
    final_logit_softcap: float = option(
        0.0, "logits become cap * tanh(logits / cap); 0 = no soft-capping", ge=0
    )
    qk_norm: bool = option(True, "RMSNorm on queries and keys per head")
    tie_embeddings: bool = option(True, "share the token embedding with the output head")


# what the Gemma 3 config.json files share: heads of 256 with q/k norms, RoPE bases 10^6
# (global layers) and 10^4 (local ones), a global layer every 6, tied embeddings
GEMMA3: dict = {
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "local_rope_theta": 10000.0,
    "global_every": 6,
    "qk_norm": True,
    "final_logit_softcap": 0.0,
    "tie_embeddings": True,
}

PRESETS: dict[str, dict] = {
    "tiny": {
        "n_layers": 3,
        "d_model": 64,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 16,
        "d_ff": 128,
        "sliding_window": 8,
        "global_every": 2,
    },
    # google/gemma-3-1b-pt config.json
    "1b": {
        **GEMMA3,
        "vocab_size": 262144,
        "n_layers": 26,
        "d_model": 1152,
        "n_heads": 4,
        "n_kv_heads": 1,
        "d_ff": 6912,
        "sliding_window": 512,
        "max_seq_len": 32768,
    },
    # google/gemma-3-4b-pt config.json, its text_config (whose vocabulary, transformers'
    # Gemma3TextConfig default, has 64 more rows than the 1B's)
    "4b": {
        **GEMMA3,
        "vocab_size": 262208,
        "n_layers": 34,
        "d_model": 2560,
        "n_heads": 8,
        "n_kv_heads": 4,
        "d_ff": 10240,
        "sliding_window": 1024,
        "rope_scaling": "linear",
        "rope_factor": 8.0,
        "max_seq_len": 131072,
    },
}

FAMILY = Family.of_package(
    __name__,
    Gemma3Config,
    PRESETS,
    "Gemma 3 (text): interleaved local/global attention, q/k norm, sandwich norms, GeGLU",
)
