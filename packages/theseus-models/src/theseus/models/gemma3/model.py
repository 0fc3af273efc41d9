"""Gemma 3 (text), top to bottom.

    tokens_BxT -> token embedding * sqrt(d_model)
      -> n_layers x SandwichBlock: x + norm(attention(norm(x))), x + norm(GeGLU(norm(x)))
         (GQA with q/k RMSNorm; local layers: a sliding window and their own RoPE base;
         every ``global_every``-th layer global: full attention, optionally scaled RoPE)
      -> final RMSNorm -> tied output head -> optional soft-capping -> logits_BxTxV

Every RMSNorm applies ``1 + scale`` (Gemma's parametrisation). The layers differ in window
and RoPE, so they run in a Python loop (``scan_layers = False``) rather than a scan.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.errors import ModelError
from theseus.models.gemma3.config import Gemma3Config
from theseus.models.layers import RMSNorm, RoPE
from theseus.models.layers.block import LayerIndex, SandwichBlock
from theseus.models.layers.mlp import GeGLU
from theseus.models.layers.rope import LinearScaling
from theseus.models.llama.model import Llama


class Gemma3(Llama):
    config: Gemma3Config
    config_class = Gemma3Config
    mlp_cls = GeGLU
    scan_layers = False

    def check_config(self) -> None:
        config = self.config
        if config.global_every < 1:
            raise ModelError(f"global_every={config.global_every}: every layer needs a kind (>= 1)")

    def is_global(self, index: LayerIndex) -> bool:
        c = self.config
        return bool(not c.sliding_window or (index + 1) % c.global_every == 0)

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(dim, eps=self.config.norm_eps, offset=1.0, dtype=self.dtype)

    def attention_options(self, index: LayerIndex) -> dict[str, Any]:
        c = self.config
        if self.is_global(index):
            scaling = LinearScaling(c.rope_factor) if c.rope_scaling == "linear" else None
            rope, window = RoPE(self.head_dim, c.rope_theta, scaling), 0
        else:
            rope, window = RoPE(self.head_dim, c.local_rope_theta), c.sliding_window
        return super().attention_options(index) | dict(
            rope=rope,
            sliding_window=window,
            qk_norm_offset=1.0,
            scale=(c.query_pre_attn_scalar or self.head_dim) ** -0.5,
        )

    def make_block(self, index: LayerIndex, rngs: nnx.Rngs) -> SandwichBlock:
        d = self.config.d_model
        attention, mlp = self.make_attention(index, rngs), self.make_mlp(index, rngs)
        norms = [self.make_norm(d) for _ in range(4)]
        return SandwichBlock(norms[0], attention, norms[1], mlp, norms[2], norms[3])

    def embed_tokens(self, tokens_BxT: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        scale = jnp.asarray(math.sqrt(self.config.d_model), jnp.float32).astype(self.dtype)
        return self.embed(tokens_BxT) * scale

    def head(self, x_BxTxD: jax.Array) -> jax.Array:
        logits_BxTxV = super().head(x_BxTxD)
        cap = self.config.final_logit_softcap
        return cap * jnp.tanh(logits_BxTxV / cap) if cap else logits_BxTxV
