"""Llama 2/3, top to bottom.

    tokens_BxT -> token embedding
      -> n_layers x Block: x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))
         (grouped-query attention, RoPE on queries and keys, optional Llama 3 scaling)
      -> final RMSNorm -> output head (tied or not) -> logits_BxTxV

``DecoderLM`` (``theseus.models.layers.decoder``) runs that stack; this file says what goes
into it. The Qwen families reuse it with their own configs (biases, q/k norm, experts).
"""

from __future__ import annotations

from typing import Any

from flax import nnx
from theseus.models.layers import Attention, DecoderLM, RMSNorm, RoPE, SwiGLU
from theseus.models.layers.block import LayerIndex
from theseus.models.layers.rope import Llama3Scaling
from theseus.models.llama.config import LlamaConfig


class Llama(DecoderLM):
    config: LlamaConfig
    config_class = LlamaConfig
    attention_cls = Attention
    mlp_cls = SwiGLU

    @property
    def head_dim(self) -> int:
        return self.config.head_dim or self.config.d_model // self.config.n_heads

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(dim, eps=self.config.norm_eps, dtype=self.dtype)

    def make_rope(self) -> RoPE:
        c = self.config
        scaling = None
        if c.rope_scaling == "llama3":
            scaling = Llama3Scaling(
                c.rope_factor,
                c.rope_low_freq_factor,
                c.rope_high_freq_factor,
                c.rope_original_max_len,
            )
        return RoPE(self.head_dim, c.rope_theta, scaling)

    def attention_options(self, index: LayerIndex) -> dict[str, Any]:
        """Keyword arguments of layer ``index``'s attention (a family changes a few; under
        ``scan_layers`` ``index`` is traced and must not choose them)."""
        c = self.config
        return dict(
            qkv_bias=c.qkv_bias,
            out_bias=c.out_bias,
            rope=self.make_rope(),
            qk_norm_eps=c.norm_eps if c.qk_norm else None,
            sliding_window=c.sliding_window,
            implementation=c.attention,
            execution=self.execution,
        )

    def make_attention(self, index: LayerIndex, rngs: nnx.Rngs) -> Attention:
        c = self.config
        return self.attention_cls(
            c.d_model,
            c.n_heads,
            c.n_kv_heads or c.n_heads,
            self.head_dim,
            **self.attention_options(index),
            **self.init_options(rngs),
        )

    def make_mlp(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        c = self.config
        return self.mlp_cls(
            c.d_model,
            c.d_ff,
            bias=c.mlp_bias,
            **self.init_options(rngs),
        )
