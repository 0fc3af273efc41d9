"""Qwen3-MoE: Qwen3 attention; every block's MLP is a top-k routed mixture of SwiGLU experts."""

from __future__ import annotations

from flax import nnx
from theseus.models.configs import Qwen3MoeConfig
from theseus.models.layers import MoE
from theseus.models.qwen import Qwen3

__all__ = ["Qwen3Moe", "Qwen3MoeConfig"]


class Qwen3Moe(Qwen3):
    config: Qwen3MoeConfig
    config_class = Qwen3MoeConfig
    moe_cls = MoE

    def make_mlp(self, index: int, rngs: nnx.Rngs) -> MoE:
        c = self.config
        return self.moe_cls(
            c.d_model,
            c.moe_d_ff,
            c.n_experts,
            c.n_experts_per_token,
            norm_topk_prob=c.norm_topk_prob,
            capacity_factor=c.capacity_factor,
            shared_d_ff=c.shared_expert_d_ff,
            std=c.init_std,
            out_std=self.out_std(),
            dtype=self.dtype,
            rngs=rngs,
        )
