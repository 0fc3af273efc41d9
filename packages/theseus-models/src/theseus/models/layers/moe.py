"""Mixture of SwiGLU experts with a top-k softmax router (``MoE``), or a sigmoid one (``SigmoidMoE``).

Stages: ``route`` (router logits -> top-k experts and weights), ``experts`` (each token runs
through its k chosen experts only), ``shared`` (an always-on expert). ``forward_with_stats``
also returns what the load-balancing loss and the router-health statistics need.

``SigmoidMoE`` is DeepSeek-V3's router: sigmoid scores; a per-expert bias (aux-loss-free
balancing, moved by a rule outside the gradient: ``theseus.core.optim.balance``) shifts which
experts are chosen, never their weights; the choice may be limited to the ``top_groups`` best
of ``n_groups`` groups of experts (node-limited routing: a group is the experts of a node);
the weights are renormalised and multiplied by ``routed_scale``.

How the experts see only their tokens, with static shapes: each of the N x k (token, expert)
assignments gets a row in a buffer whose rows are grouped by expert (``assign_rows``: a
stable sort by expert), the tokens are gathered into it, the expert SwiGLU runs on it, and
each token gathers its k outputs back and sums them weighted by its router weights. Layouts:

* dropless (``capacity_factor=0``, the default), ``grouping="tiles"``: each expert's group is
  padded to whole tiles of ``dropless_tile`` rows and each tile multiplies with its own
  expert's weights (one batched matmul over the tiles, the weights gathered per tile). The
  FLOPs are the routed rows' plus at most 1 / PAD_SHARE of padding, on every backend.
* dropless, ``grouping="ragged_dot"``: the sorted rows go through ``jax.lax.ragged_dot``,
  a grouped matmul natively on TPU (but its weight gradient multiplies every row with every
  expert, E times the routed FLOPs); elsewhere (jax 0.10) it lowers to a masked matmul with
  every expert, E / k times the routed FLOPs.
* dropless, ``grouping="grouped"``: ``ragged_dot`` forward, with theseus's own weight
  gradient, a Pallas kernel that does the routed work (``layers/grouped_matmul.py``; a TPU
  kernel: elsewhere the weight gradient is ragged_dot's own).
* dropless, ``grouping="pallas"``: theseus's Pallas kernels for all three products, the
  forward and input-gradient ones too (TPU kernels: elsewhere all three are ragged_dot's).
* with a capacity (``capacity_factor > 0``): every expert owns ``capacity`` rows, claimed by
  first choices first, then in token order; assignments past it are dropped (their output
  is zero) and the fraction reported. Padding tokens claim no row.

``model.moe_grouping=auto`` (the default) takes the grouping measured fastest on the chip
(``theseus.core.chips.moe_grouping``): the execution plan says which.

On a mesh (inside a training step) the tokens are routed as the model's execution plan, which
the layer is built with, says:
with the experts split over ``expert`` (all-to-all), or for the dropless layer when the mesh
splits the tokens (per device), each device routes its own through ``layers/expert_parallel.py`` (``routes_per_device``), which
runs the same buffer layouts (``layers/expert_rows.py``) per device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.chips.moe_grouping import GROUPINGS
from theseus.core.execution import ExecutionPlan
from theseus.core.optim.balance import BalanceBias
from theseus.core.sharding.rules import BATCH_AXES, CONTEXT_AXIS, EXPERT_AXIS
from theseus.models.errors import ModelError
from theseus.models.layers.expert_parallel import expert_parallel
from theseus.models.layers.expert_rows import (
    MAX_TILE,
    PAD_SHARE,
    Matmul,
    assign_rows,
    combine,
    dropless_tile,
    expert_capacity,
    grouped_tiles,
    routed_rows,
    routing_stats,
    swiglu_experts,
    tile_matmul,
)
from theseus.models.layers.grouped_matmul import weight_gradient_for
from theseus.models.layers.linear import Linear, param
from theseus.models.layers.mlp import SwiGLU

__all__ = [  # the buffer layouts live in expert_rows; these names stay importable from here
    "GROUPINGS",
    "MAX_TILE",
    "PAD_SHARE",
    "MoE",
    "assign_rows",
    "dropless_tile",
    "grouped_tiles",
    "load_balancing_loss",
    "tile_matmul",
]
# The balancing bias's gradient slot carries this times (load - mean load), per expert: only
# its sign is used, and a small multiple keeps the logged gradient norm what the loss makes it.
LOAD_CARRIER = 1e-6


def load_balancing_loss(
    counts_E: jax.Array, prob_sums_E: jax.Array, n_tokens: jax.Array
) -> jax.Array:
    """Switch-Transformer loss ``E * sum_e f_e * P_e`` (as transformers computes it).

    ``f_e`` is the fraction of top-k assignments to expert e, ``P_e`` its mean router
    probability; both summed over layers and divided by layers x tokens.
    """
    E = counts_E.shape[-1]
    n = jnp.maximum(n_tokens, 1.0)
    return E * jnp.sum((counts_E / n) * (prob_sums_E / n))


class MoE(nnx.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        k: int,
        *,
        norm_topk_prob: bool = True,
        capacity_factor: float = 0.0,
        grouping: str = "tiles",
        shared_d_ff: int = 0,
        execution: ExecutionPlan | None = None,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        """``execution``: the model's plan (how the tokens are routed on its mesh); without
        one the layer routes the whole batch at once."""
        E, D, F = n_experts, d_model, d_ff
        self.router = Linear(
            (D,), (E,), ("embed",), ("experts",), std=std, dtype=jnp.float32, rngs=rngs
        )
        normal = jax.random.normal
        self.w_gate = param(std * normal(rngs.params(), (E, D, F)), ("experts", "embed", "mlp"))
        self.w_up = param(std * normal(rngs.params(), (E, D, F)), ("experts", "embed", "mlp"))
        out_std = std if out_std is None else out_std
        self.w_down = param(out_std * normal(rngs.params(), (E, F, D)), ("experts", "mlp", "embed"))
        self.shared_expert = (
            SwiGLU(D, shared_d_ff, std=std, out_std=out_std, dtype=dtype, rngs=rngs)
            if shared_d_ff
            else None
        )
        self.n_experts, self.k = E, k
        self.norm_topk_prob = norm_topk_prob
        self.capacity_factor = capacity_factor
        if grouping not in GROUPINGS:
            raise ModelError(f"moe_grouping={grouping!r}: use one of {', '.join(GROUPINGS)}")
        self.grouping = grouping
        self.dtype = dtype
        self._route_as_planned(execution or ExecutionPlan(experts="global"))

    # ------------------------------------------------------------------ the stages

    def route(self, x_xD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Router probabilities (...xE, f32), chosen experts (...xk) and their weights (...xk)
        of tokens with any leading axes (NxD, BxTxD)."""
        probs_xE = jax.nn.softmax(self.router(x_xD.astype(jnp.float32)), axis=-1)
        top_w_xk, top_e_xk = jax.lax.top_k(probs_xE, self.k)
        if self.norm_topk_prob:
            top_w_xk = top_w_xk / jnp.sum(top_w_xk, axis=-1, keepdims=True)
        return probs_xE, top_e_xk, top_w_xk

    def expert_weights(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(w_gate, w_up, w_down)`` (ExDxF, ExDxF, ExFxD) in the compute dtype."""
        dtype = self.dtype
        return (
            self.w_gate[...].astype(dtype),
            self.w_up[...].astype(dtype),
            self.w_down[...].astype(dtype),
        )

    def expert_ffn(self, x: jax.Array, matmul: Matmul) -> jax.Array:
        """The experts' SwiGLU on their rows; ``matmul(x, w_ExIxO)`` picks each row's expert."""
        return swiglu_experts(x, self.expert_weights(), matmul)

    def capacity(self, assignments: int) -> int | None:
        """Rows each expert owns for ``assignments`` (token, expert) pairs; None: dropless."""
        if self.capacity_factor <= 0:
            return None
        return expert_capacity(self.capacity_factor, assignments, self.n_experts)

    def experts(
        self, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array, valid_N: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The weighted sum of the chosen experts' outputs, and the fraction of assignments dropped."""
        N, k = x_NxD.shape[0], self.k
        capacity = self.capacity(N * k)
        # Assignments in k-major order (all first choices, then all second, ...): with a
        # capacity, the order in which they claim their expert's rows.
        expert_M = top_e_Nxk.T.reshape(N * k)
        # dropless: every assignment gets a row, padding tokens' too; with a capacity,
        # padding tokens claim none
        keep_M = jnp.ones((N * k,), bool) if capacity is None else jnp.tile(valid_N, k)
        y_MxD, kept_M = routed_rows(
            x_NxD.astype(self.dtype),
            expert_M,
            keep_M,
            self.expert_weights(),
            capacity=capacity,
            grouping=self.grouping,
            weight_gradient=self.weight_gradient,
            unkept_read=capacity is not None,  # dropless: every assignment has a row
        )
        y_NxD = combine(y_MxD, top_w_Nxk.astype(self.dtype))
        if capacity is None:
            return y_NxD, jnp.zeros((), jnp.float32)
        dropped = 1.0 - jnp.sum(kept_M) / jnp.maximum(jnp.sum(keep_M), 1)
        return y_NxD, dropped.astype(jnp.float32)

    def _route_as_planned(self, execution: ExecutionPlan) -> None:
        """Part of building the layer: route as ``execution`` says (``all_to_all``,
        ``per_device``, ``global`` or ``none``), the all-to-all's dispatch sized by its
        capacity factor (the layer's own ``capacity_factor`` where it has one; 0: dropless)
        and sent its way (``layers/expert_parallel.py``), on its mesh (axis sizes). A layer
        that overrides ``experts`` cannot be split over ``expert``."""
        if execution.experts == "all_to_all" and type(self).experts is not MoE.experts:
            raise ModelError(
                f"sharding.expert > 1: {type(self).__name__} overrides MoE.experts, and "
                "expert parallelism runs MoE's own routed computation"
            )
        self.routing = execution.experts
        # the capacity factor the all-to-all dispatch of a dropless layer is sized by (0:
        # dropless slabs); how it sends the tokens: slabs (fixed-size) or ragged (exactly the
        # assignments; ragged_gathered: the same from an all-gather, off TPU)
        self.dispatch_capacity = float(execution.expert_capacity)
        self.dispatch = execution.expert_dispatch
        self.mesh_sizes = execution.mesh_axes  # (axis, size) pairs: hashable, in the graph
        # the grouped weight-gradient kernel is TPU's: elsewhere (and for a layer built
        # without a platform in its plan) ragged_dot's own runs
        self.weight_gradient = weight_gradient_for(execution.platform)

    def routes_per_device(self) -> bool:
        """Whether each device routes its own tokens (``layers/expert_parallel.py``), as the
        plan says: ``all_to_all`` (the experts split over ``expert``) and, for the dropless
        layer, ``per_device`` (the mesh splits the tokens: each token's output does not
        depend on the others', so routing them where they are is the same layer without
        gathering the batch; a capacity counts over the whole batch, so that layer keeps one
        routing for all). A model used outside the step (an evaluation on one device) is
        built with the plan unsplit and routes the whole batch."""
        sizes = dict(self.mesh_sizes)
        if self.routing == "all_to_all":
            return sizes.get(EXPERT_AXIS, 1) > 1
        if self.routing != "per_device" or type(self).experts is not MoE.experts:
            return False
        split = any(sizes.get(a, 1) > 1 for a in (*BATCH_AXES, CONTEXT_AXIS))
        return split and self.capacity_factor <= 0

    def shared(self, x_xD: jax.Array) -> jax.Array | None:
        return None if self.shared_expert is None else self.shared_expert(x_xD)

    # ------------------------------------------------------------------ the forward

    def forward_with_stats(
        self, x_BxTxD: jax.Array, valid_BxT: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The layer's output and its routing statistics over the valid tokens (plain arrays:
        ``counts`` (E) assignments per expert, ``prob_sums`` (E) router probability sums,
        ``tokens``, ``drop_fraction``). Batch and sequence axes stay apart until the experts
        (merging them would gather a sequence split over ``context``)."""
        B, T, D = x_BxTxD.shape
        valid_BxT = jnp.ones((B, T), bool) if valid_BxT is None else valid_BxT
        if self.routes_per_device():  # tokens stay on their device or travel to their experts
            y_BxTxD, stats = expert_parallel(self, x_BxTxD, valid_BxT)
        else:
            probs_BxTxE, top_e_BxTxk, top_w_BxTxk = self.route(x_BxTxD)
            N, k = B * T, self.k
            y_NxD, dropped = self.experts(
                x_BxTxD.reshape(N, D),
                top_e_BxTxk.reshape(N, k),
                top_w_BxTxk.reshape(N, k),
                valid_BxT.reshape(N),
            )
            y_BxTxD = y_NxD.reshape(B, T, D)
            stats = routing_stats(probs_BxTxE, top_e_BxTxk, valid_BxT, self.n_experts, dropped)
        shared = self.shared(x_BxTxD)
        if shared is not None:
            y_BxTxD = y_BxTxD + shared
        return y_BxTxD.astype(self.dtype), stats

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        return self.forward_with_stats(x_BxTxD)[0]


def group_limited_top_k(
    scores_xE: jax.Array, k: int, n_groups: int = 1, top_groups: int = 1
) -> jax.Array:
    """The k best experts of each token among its ``top_groups`` best groups (...xk), for
    tokens with any leading axes.

    The E experts form ``n_groups`` consecutive groups, each rated by the sum of its two best
    scores; experts outside the chosen groups cannot be picked. One group: a plain top-k.
    """
    E = scores_xE.shape[-1]
    if n_groups > 1 and top_groups < n_groups:
        grouped_xGxM = scores_xE.reshape(*scores_xE.shape[:-1], n_groups, E // n_groups)
        group_scores_xG = jax.lax.top_k(grouped_xGxM, min(2, E // n_groups))[0].sum(-1)
        chosen_xg = jax.lax.top_k(group_scores_xG, top_groups)[1]
        keep_xG = jnp.any(jax.nn.one_hot(chosen_xg, n_groups, dtype=bool), axis=-2)
        keep_xE = jnp.repeat(keep_xG, E // n_groups, axis=-1)
        scores_xE = jnp.where(keep_xE, scores_xE, -jnp.inf)
    return jax.lax.top_k(scores_xE, k)[1]


class SigmoidMoE(MoE):
    """``MoE`` routed by sigmoid scores, a balancing bias and (optionally) expert groups."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        k: int,
        *,
        n_groups: int = 1,
        top_groups: int = 1,
        routed_scale: float = 1.0,
        bias_update_rate: float = 0.0,
        **kwargs,
    ) -> None:
        super().__init__(d_model, d_ff, n_experts, k, **kwargs)
        if n_experts % n_groups or not 1 <= top_groups <= n_groups:
            raise ModelError(
                f"n_group={n_groups}, topk_group={top_groups}: the groups must divide the "
                f"{n_experts} experts and at least one (at most all) be chosen"
            )
        if top_groups * (n_experts // n_groups) < k:
            raise ModelError(
                f"topk_group={top_groups} groups of {n_experts // n_groups} experts hold fewer "
                f"than the {k} experts each token needs"
            )
        self.router_bias = BalanceBias(
            jnp.zeros((n_experts,)),
            out_sharding=("experts",),
            eager_sharding=False,
            update_rate=bias_update_rate,
        )
        self.n_groups, self.top_groups, self.routed_scale = n_groups, top_groups, routed_scale

    def route(self, x_xD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Sigmoid scores (...xE), the experts chosen with the bias (...xk), their weights
        (...xk): the scores without the bias, renormalised, times ``routed_scale``."""
        scores_xE = jax.nn.sigmoid(self.router(x_xD.astype(jnp.float32)))
        choice_xE = scores_xE + jax.lax.stop_gradient(self.router_bias[...])
        top_e_xk = group_limited_top_k(choice_xE, self.k, self.n_groups, self.top_groups)
        top_w_xk = jnp.take_along_axis(scores_xE, top_e_xk, axis=-1)
        if self.norm_topk_prob:
            top_w_xk = top_w_xk / (jnp.sum(top_w_xk, axis=-1, keepdims=True) + 1e-20)
        return scores_xE, top_e_xk, top_w_xk * self.routed_scale

    def forward_with_stats(
        self, x_BxTxD: jax.Array, valid_BxT: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """``MoE``'s, plus ``balance``: zero, with a gradient on the bias of
        ``LOAD_CARRIER * (load_e - 1 / E)`` (``load_e``: expert e's share of the assignments
        of the valid tokens), which the optimizer turns into the bias's update."""
        y_BxTxD, stats = super().forward_with_stats(x_BxTxD, valid_BxT)
        counts_E = stats["counts"]
        load_E = counts_E / jnp.maximum(jnp.sum(counts_E), 1.0)
        carried_E = jax.lax.stop_gradient(LOAD_CARRIER * (load_E - 1.0 / self.n_experts))
        bias_E = self.router_bias[...]
        stats["balance"] = jnp.sum(carried_E * (bias_E - jax.lax.stop_gradient(bias_E)))
        return y_BxTxD, stats
