"""What routed experts (``moe.py``) change in a decoder, for the MoE families to mix in.

``ExpertsDecoder`` goes before a family's ``DecoderLM`` base (``class Qwen3Moe(
SoftmaxExpertsDecoder, Qwen3)``), for a config with the fields of
:class:`~theseus.models.moe_fields.ExpertFields`: ``make_experts`` builds an expert layer
from them, ``matmul_share`` counts k of the E experts a token goes through in the FLOPs, and
``router_health`` and ``reported`` turn the blocks' routing statistics into ``aux_losses``
entries. ``SoftmaxExpertsDecoder`` is Qwen3-MoE's and Mixtral's decoder: every MLP an
``MoE`` in an ``MoEBlock``, and the load-balancing loss.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.model import STAT_PREFIX
from theseus.models.layers.block import Block, LayerIndex
from theseus.models.layers.decoder import DecoderLM
from theseus.models.layers.moe import MoE, load_balancing_loss

EXPERT_PARAMS = ("w_gate", "w_up", "w_down")  # the stacked expert kernels of ``MoE``


class MoEBlock(Block):
    """A block whose feed-forward is an ``MoE``: reports its routing statistics."""

    mlp: MoE

    def feed_forward(
        self, h_BxTxD: jax.Array, valid_BxT: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        return self.mlp.forward_with_stats(h_BxTxD, valid_BxT)


def router_health(counts_LxE: jax.Array, drop_fraction_L: jax.Array) -> dict[str, jax.Array]:
    """The mean fraction of expert assignments dropped, and the most and least loaded expert
    of any layer (its share of the layer's assignments times E: 1 is a perfect balance, 0 an
    unused expert)."""
    E = counts_LxE.shape[-1]
    load_LxE = E * counts_LxE / jnp.maximum(counts_LxE.sum(-1, keepdims=True), 1.0)
    return {
        "moe_drop_fraction": jnp.mean(drop_fraction_L),
        "moe_max_load": jnp.max(load_LxE),
        "moe_min_load": jnp.min(load_LxE),
    }


def reported(
    aux: dict[str, jax.Array], summary: dict[str, jax.Array]
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """What ``aux_losses`` returns: the losses (the trainer adds them to the loss) with the
    statistics under ``stat/`` names (logged, added to nothing), and the statistics alone."""
    summary = jax.lax.stop_gradient(summary)
    return aux | {f"{STAT_PREFIX}{name}": value for name, value in summary.items()}, summary


class ExpertsDecoder(DecoderLM):
    """A decoder with routed-expert layers (configured by ``ExpertFields``)."""

    def make_experts(self, moe_cls: type, rngs: nnx.Rngs, **options: Any) -> nnx.Module:
        """An expert layer ``moe_cls`` of the config's experts; ``options``: its own."""
        c = self.config
        return moe_cls(
            c.d_model,
            c.moe_d_ff,
            c.n_experts,
            c.n_experts_per_token,
            norm_topk_prob=c.norm_topk_prob,
            capacity_factor=c.capacity_factor,
            grouping=self.grouping(),
            execution=self.execution,
            **self.init_options(rngs),
            **options,
        )

    def grouping(self) -> str:
        """The config's ``moe_grouping``; ``auto``: the one the execution plan chose for its
        chips (``tiles`` for a model built without one)."""
        asked = self.config.moe_grouping
        return self.execution.moe_grouping if asked == "auto" else asked

    def matmul_share(self, path: tuple[str, ...], size: float) -> float:
        """A token goes through k of the E routed experts (``n_experts_per_token /
        n_experts``); any other kernel (a shared expert's too) it multiplies with whole."""
        if path[-1] in EXPERT_PARAMS:
            return size * (self.config.n_experts_per_token / self.config.n_experts)
        return super().matmul_share(path, size)


class SoftmaxExpertsDecoder(ExpertsDecoder):
    """Every MLP a top-k softmax-routed ``moe_cls`` (with an optional shared expert of width
    ``shared_expert_d_ff``), balanced by a loss weighted by ``router_aux_loss_coef``."""

    block_cls: ClassVar[type] = MoEBlock
    moe_cls: ClassVar[type] = MoE

    def make_mlp(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        return self.make_experts(self.moe_cls, rngs, shared_d_ff=self.config.shared_expert_d_ff)

    def aux_losses(
        self, stats: dict[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """The load-balancing loss over all layers, weighted by ``router_aux_loss_coef``, and
        router-health statistics: the unweighted loss and ``router_health``'s.

        ``stats`` are the blocks' ``MoE`` statistics stacked on a leading L axis
        (``counts`` LxE).
        """
        if not stats:  # no layers
            return {}, {}
        E = self.config.n_experts
        counts_LxE = stats["counts"].reshape(-1, E)
        prob_sums_E = stats["prob_sums"].reshape(-1, E).sum(0)
        loss = load_balancing_loss(counts_LxE.sum(0), prob_sums_E, jnp.sum(stats["tokens"]))
        summary = {"moe_load_balance": loss, **router_health(counts_LxE, stats["drop_fraction"])}
        return reported({"moe_load_balance": self.config.router_aux_loss_coef * loss}, summary)
