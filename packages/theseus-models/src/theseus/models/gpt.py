"""GPT-2: learned positions, pre-LayerNorm blocks, GELU MLP, biases, tied embeddings.

Optionally RoPE instead of learned positions (``positions="rope"``).
"""

from __future__ import annotations

import math

import jax
from flax import nnx
from theseus.models.configs import GPTConfig
from theseus.models.errors import ModelError
from theseus.models.layers import MLP, Attention, Block, DecoderLM, Embedding, LayerNorm, RoPE

__all__ = ["GPT", "GPTConfig"]


class GPT(DecoderLM):
    config: GPTConfig
    config_class = GPTConfig
    attention_cls = Attention
    mlp_cls = MLP
    block_cls = Block

    def check_config(self, config: GPTConfig) -> None:
        if config.positions not in ("learned", "rope"):
            raise ModelError(f"gpt positions={config.positions!r}: use 'learned' or 'rope'")
        if config.d_model % config.n_heads:
            raise ModelError(
                f"d_model={config.d_model} is not a multiple of n_heads={config.n_heads}"
            )

    def __init__(self, config: GPTConfig, *, rngs: nnx.Rngs) -> None:
        super().__init__(config, rngs=rngs)
        config = self.config
        if config.positions == "learned":
            self.wpe = Embedding(
                config.max_seq_len,
                config.d_model,
                axes=(None, "embed"),
                std=config.init_std,
                dtype=self.dtype,
                rngs=rngs,
            )
        else:
            self.wpe = None

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(dim, eps=self.config.norm_eps, bias=self.config.bias, dtype=self.dtype)

    def make_block(self, index: int, rngs: nnx.Rngs) -> Block:
        c = self.config
        head_dim = c.d_model // c.n_heads
        rope = RoPE(head_dim, c.rope_theta) if c.positions == "rope" else None
        out_std = c.init_std / math.sqrt(2 * c.n_layers)  # GPT-2's residual projection scaling
        attention = self.attention_cls(
            c.d_model,
            c.n_heads,
            c.n_heads,
            head_dim,
            qkv_bias=c.bias,
            out_bias=c.bias,
            rope=rope,
            std=c.init_std,
            out_std=out_std,
            dtype=self.dtype,
            rngs=rngs,
        )
        mlp = self.mlp_cls(
            c.d_model,
            c.d_ff or 4 * c.d_model,
            bias=c.bias,
            std=c.init_std,
            out_std=out_std,
            dtype=self.dtype,
            rngs=rngs,
        )
        return self.block_cls(self.make_norm(c.d_model), attention, self.make_norm(c.d_model), mlp)

    def embed_tokens(self, tokens_BxT: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        x = self.embed(tokens_BxT)
        if self.wpe is not None:
            x = x + self.wpe(positions_BxT)
        return x
