"""Qwen3-MoE: Qwen3 whose every MLP is a top-k routed mixture of SwiGLU experts.

Besides the expert layer, the family adds what experts change in the model: each block
reports its routing statistics, ``aux_losses`` turns them into the load-balancing loss and
router-health ``stat/`` entries (logged, not added to the loss), and ``matmul_share`` counts
k of the E experts a token goes through in the FLOPs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.model import STAT_PREFIX
from theseus.models.layers import Block
from theseus.models.layers.moe import MoE, load_balancing_loss
from theseus.models.qwen3.model import Qwen3
from theseus.models.qwen3_moe.config import Qwen3MoeConfig

EXPERT_PARAMS = ("w_gate", "w_up", "w_down")  # the stacked expert kernels of ``MoE``


class MoEBlock(Block):
    """A block whose feed-forward is an ``MoE``: reports its routing statistics."""

    def feed_forward(
        self, h_BxTxD: jax.Array, valid_BxT: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        return self.mlp.forward_with_stats(h_BxTxD, valid_BxT)


class Qwen3Moe(Qwen3):
    config: Qwen3MoeConfig
    config_class = Qwen3MoeConfig
    block_cls = MoEBlock
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
            grouping=c.moe_grouping,
            shared_d_ff=c.shared_expert_d_ff,
            std=c.init_std,
            out_std=self.out_std(),
            dtype=self.dtype,
            rngs=rngs,
        )

    def aux_losses(
        self, stats: dict[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """The load-balancing loss over all layers, weighted by ``router_aux_loss_coef`` (the
        trainer adds it to the loss), and router-health statistics under ``stat/`` names (the
        trainer logs them, adds nothing): the unweighted loss, the mean fraction of expert
        assignments dropped, and the most and least loaded expert of any layer (its share of
        the layer's assignments times E: 1 is a perfect balance, 0 an unused expert).

        ``stats`` are the blocks' ``MoE`` statistics stacked on a leading L axis
        (``counts`` LxE); the second dict holds the statistics without the prefix.
        """
        if not stats:  # no layers
            return {}, {}
        E = self.config.n_experts
        counts_LxE = stats["counts"].reshape(-1, E)
        prob_sums_E = stats["prob_sums"].reshape(-1, E).sum(0)
        loss = load_balancing_loss(counts_LxE.sum(0), prob_sums_E, jnp.sum(stats["tokens"]))
        load_LxE = E * counts_LxE / jnp.maximum(counts_LxE.sum(-1, keepdims=True), 1.0)
        summary = jax.lax.stop_gradient(
            {
                "moe_load_balance": loss,
                "moe_drop_fraction": jnp.mean(stats["drop_fraction"]),
                "moe_max_load": jnp.max(load_LxE),
                "moe_min_load": jnp.min(load_LxE),
            }
        )
        aux = {"moe_load_balance": self.config.router_aux_loss_coef * loss}
        return aux | {f"{STAT_PREFIX}{name}": value for name, value in summary.items()}, summary

    def matmul_share(self, path: tuple[str, ...], size: float) -> float:
        """A token goes through k of the E experts (``n_experts_per_token / n_experts``)."""
        if path[-1] in EXPERT_PARAMS:
            return size * (self.config.n_experts_per_token / self.config.n_experts)
        return super().matmul_share(path, size)
