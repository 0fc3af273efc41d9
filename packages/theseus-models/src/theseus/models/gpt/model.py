"""GPT-2, top to bottom.

    tokens_BxT -> token embedding + learned position embedding (wpe)
      -> n_layers x Block: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)), GELU
      -> final LayerNorm -> output head tied to the token embedding -> logits_BxTxV

``DecoderLM`` (``theseus.models.layers.decoder``) runs that stack, its masks, KV cache and
head; this file says what goes into it. ``positions="rope"`` replaces the position table
with rotary embeddings in every attention layer.
"""

from __future__ import annotations

import jax
from flax import nnx
from theseus.core.execution import ExecutionPlan
from theseus.models.errors import ModelError
from theseus.models.gpt.config import GPTConfig
from theseus.models.layers import MLP, Attention, DecoderLM, Embedding, LayerNorm, RoPE
from theseus.models.layers.block import LayerIndex


class GPT(DecoderLM):
    config: GPTConfig
    config_class = GPTConfig
    attention_cls = Attention
    mlp_cls = MLP

    def __init__(
        self, config: GPTConfig, *, rngs: nnx.Rngs, execution: ExecutionPlan | None = None
    ) -> None:
        super().__init__(config, rngs=rngs, execution=execution)  # embed, blocks, norm, head
        c = self.config
        # After the stack: the parameters draw their random numbers in this order.
        self.wpe = (
            Embedding(
                c.max_seq_len,
                c.d_model,
                axes=(None, "embed"),
                std=c.init_std,
                dtype=self.dtype,
                rngs=rngs,
            )
            if c.positions == "learned"
            else None
        )

    def check_config(self) -> None:
        config = self.config
        if config.positions not in ("learned", "rope"):
            raise ModelError(f"gpt positions={config.positions!r}: use 'learned' or 'rope'")
        if config.d_model % config.n_heads:
            raise ModelError(
                f"d_model={config.d_model} is not a multiple of n_heads={config.n_heads}"
            )

    def embed_tokens(self, tokens_BxT: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        x_BxTxD = self.embed(tokens_BxT)
        if self.wpe is not None:
            x_BxTxD = x_BxTxD + self.wpe(positions_BxT)
        return x_BxTxD

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(dim, eps=self.config.norm_eps, bias=self.config.bias, dtype=self.dtype)

    def make_attention(self, index: LayerIndex, rngs: nnx.Rngs) -> Attention:
        c = self.config
        head_dim = c.d_model // c.n_heads
        return self.attention_cls(
            c.d_model,
            c.n_heads,
            c.n_heads,
            head_dim,
            qkv_bias=c.bias,
            out_bias=c.bias,
            rope=RoPE(head_dim, c.rope_theta) if c.positions == "rope" else None,
            implementation=c.attention,
            execution=self.execution,
            **self.init_options(rngs),
        )

    def make_mlp(self, index: LayerIndex, rngs: nnx.Rngs) -> MLP:
        c = self.config
        return self.mlp_cls(
            c.d_model,
            c.d_ff or 4 * c.d_model,
            bias=c.bias,
            **self.init_options(rngs),
        )
