"""DeepSeek-V3, top to bottom.

    tokens_BxT -> token embedding
      -> first_dense_layers x Block: x + MLA(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))
      -> the rest x Block:           x + MLA(RMSNorm(x)), then x + MoE(RMSNorm(x))
         (MoE: shared experts + the top-k of the routed ones, chosen by sigmoid scores plus
         a balancing bias within the best expert groups)
      -> final RMSNorm -> output head -> logits_BxTxV

MLA is ``layers/mla.py``, the router ``layers/moe.py``'s ``SigmoidMoE``. Dense and MoE
blocks differ, so the layers run in a Python loop (``scan_layers = False``); the dense blocks
report zero routing statistics so that every layer's have one shape.

Balancing without an auxiliary loss: the MoE layers' ``balance`` statistics sum to the aux
entry ``moe_bias_balance``, zero in value, whose gradient carries each expert's load to its
bias; the optimizer (``theseus.core.optim.balance``) moves the bias by ``bias_update_rate``
against the load. Multi-token prediction is left out (see the config).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.chips.moe_grouping import CHOICES
from theseus.models.deepseek_v3.config import DeepseekV3Config
from theseus.models.errors import ModelError
from theseus.models.layers import Block, RMSNorm, RoPE, SwiGLU
from theseus.models.layers.block import LayerIndex
from theseus.models.layers.mla import MultiHeadLatentAttention
from theseus.models.layers.moe import SigmoidMoE
from theseus.models.layers.moe_decoder import ExpertsDecoder, MoEBlock, reported, router_health
from theseus.models.layers.rope import YarnScaling

ROUTING_STATS = ("counts", "prob_sums", "tokens", "drop_fraction", "balance")


class DenseBlock(Block):
    """A dense block reporting zero routing statistics (the MoE blocks' shapes)."""

    def __init__(self, *parts: nnx.Module, n_experts: int) -> None:
        super().__init__(*parts)
        self.n_experts = n_experts

    def feed_forward(
        self, h_BxTxD: jax.Array, valid_BxT: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        zeros = {name: jnp.zeros((), jnp.float32) for name in ROUTING_STATS}
        zeros["counts"] = zeros["prob_sums"] = jnp.zeros((self.n_experts,), jnp.float32)
        return self.mlp(h_BxTxD), zeros


class DeepseekV3(ExpertsDecoder):
    config: DeepseekV3Config
    config_class = DeepseekV3Config
    scan_layers = False

    def check_config(self) -> None:
        c = self.config
        if c.rope_scaling not in ("none", "yarn"):
            raise ModelError(f"rope_scaling={c.rope_scaling!r}: use 'none' or 'yarn'")
        if c.moe_grouping not in CHOICES:
            raise ModelError(f"moe_grouping={c.moe_grouping!r}: use one of {', '.join(CHOICES)}")
        if c.qk_rope_dim % 2:
            raise ModelError(f"qk_rope_dim={c.qk_rope_dim}: RoPE rotates pairs, use an even width")

    def make_norm(self, dim: int) -> RMSNorm:
        return RMSNorm(dim, eps=self.config.norm_eps, dtype=self.dtype)

    def rope_scaling(self) -> YarnScaling | None:
        c = self.config
        if c.rope_scaling != "yarn":
            return None
        return YarnScaling(
            c.rope_factor,
            c.rope_original_max_len,
            c.rope_beta_fast,
            c.rope_beta_slow,
            c.rope_mscale,
            c.rope_mscale_all_dim,
        )

    def make_attention(self, index: LayerIndex, rngs: nnx.Rngs) -> MultiHeadLatentAttention:
        c = self.config
        scaling = self.rope_scaling()
        softmax_factor = scaling.softmax_factor if scaling else 1.0
        return MultiHeadLatentAttention(
            c.d_model,
            c.n_heads,
            q_lora_rank=c.q_lora_rank,
            kv_lora_rank=c.kv_lora_rank,
            qk_nope_dim=c.qk_nope_dim,
            qk_rope_dim=c.qk_rope_dim,
            v_head_dim=c.v_head_dim,
            rope=RoPE(c.qk_rope_dim, c.rope_theta, scaling, interleaved=c.rope_interleave),
            norm_eps=c.norm_eps,
            scale=(c.qk_nope_dim + c.qk_rope_dim) ** -0.5 * softmax_factor,
            implementation=c.attention,
            execution=self.execution,
            **self.init_options(rngs),
        )

    def make_mlp(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        c = self.config
        if index < c.first_dense_layers:
            return SwiGLU(c.d_model, c.d_ff, **self.init_options(rngs))
        return self.make_experts(
            SigmoidMoE,
            rngs,
            n_groups=c.n_groups,
            top_groups=c.top_groups,
            routed_scale=c.routed_scale,
            bias_update_rate=c.bias_update_rate,
            shared_d_ff=c.n_shared_experts * c.moe_d_ff,
        )

    def make_block(self, index: LayerIndex, rngs: nnx.Rngs) -> Block:
        d = self.config.d_model
        parts = (  # in the init order: norm, attention, norm, MLP
            self.make_norm(d),
            self.make_attention(index, rngs),
            self.make_norm(d),
            self.make_mlp(index, rngs),
        )
        if index < self.config.first_dense_layers:
            return DenseBlock(*parts, n_experts=self.config.n_experts)
        return MoEBlock(*parts)

    def aux_losses(
        self, stats: dict[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """``moe_bias_balance`` (zero; its gradient carries the loads to the balancing
        biases) and router-health statistics of the MoE layers under ``stat/`` names: the
        mean fraction of assignments dropped, and the most and least loaded expert of any
        layer (its share of the layer's assignments times E; 1 is a perfect balance)."""
        first = self.config.first_dense_layers
        if not stats or stats["counts"].shape[0] <= first:
            return {}, {}
        summary = router_health(stats["counts"][first:], stats["drop_fraction"][first:])
        return reported({"moe_bias_balance": jnp.sum(stats["balance"][first:])}, summary)
