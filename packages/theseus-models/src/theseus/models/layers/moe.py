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
  a grouped matmul natively on TPU; elsewhere (jax 0.10) it lowers to a masked matmul with
  every expert, E / k times the routed FLOPs, so it is not the default.
* with a capacity (``capacity_factor > 0``): every expert owns ``capacity`` rows, claimed by
  first choices first, then in token order; assignments past it are dropped (their output
  is zero) and the fraction reported. Padding tokens claim no row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.optim.balance import BalanceBias
from theseus.models.errors import ModelError
from theseus.models.layers.linear import Linear, param
from theseus.models.layers.mlp import SwiGLU

MAX_TILE = 512  # rows per tile in the dropless layout, at most
PAD_SHARE = 8  # the tiles' padding adds at most 1 / PAD_SHARE of the routed rows
GROUPINGS = ("tiles", "ragged_dot")  # how the dropless layout multiplies with its experts

Matmul = Callable[[jax.Array, jax.Array], jax.Array]  # (rows, w_ExIxO) -> rows x O
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


def dropless_tile(assignments: int, n_experts: int) -> int:
    """Rows per tile: the largest power of two <= assignments / (PAD_SHARE E), in [1, MAX_TILE].

    Padding each of the E groups to whole tiles adds fewer than E x tile rows, at most
    1 / PAD_SHARE of the assignments; smaller tiles pad less but gather more weight copies
    (one per tile).
    """
    tile = max(1, assignments // (PAD_SHARE * n_experts))
    return min(1 << (tile.bit_length() - 1), MAX_TILE)


def grouped_tiles(assignments: int, n_experts: int, tile: int) -> int:
    """Tiles enough for any split of ``assignments`` rows into ``n_experts`` padded groups."""
    return (assignments + n_experts * (tile - 1)) // tile


def assign_rows(
    expert_M: jax.Array, keep_M: jax.Array, n_experts: int, tile: int, capacity: int | None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Buffer rows of the M assignments, grouped by expert, in assignment order within one.

    ``expert_M``: each assignment's expert; ``keep_M``: whether it asks for a row at all.
    Returns ``row_M`` (the assignment's row; the buffer size where it has none), ``kept_M``,
    ``tile_expert_G`` (the expert of each tile of ``tile`` rows) and ``sizes_E`` (rows asked
    of each expert). Dropless (``capacity`` None): the groups follow each other, each padded
    to whole tiles (``tile=1``: no padding). With a capacity: expert e owns the rows
    ``[e C, (e + 1) C)`` (``tile`` = C) and the assignments ranked past C are dropped.
    """
    E = n_experts
    M = expert_M.shape[0]
    key_M = jnp.where(keep_M, expert_M, E).astype(jnp.int32)  # E: no row, sorted last
    order_M = jnp.argsort(key_M, stable=True)  # sorted position -> assignment
    position_M = jnp.zeros((M,), jnp.int32).at[order_M].set(jnp.arange(M, dtype=jnp.int32))
    sizes_E = jnp.zeros((E + 1,), jnp.int32).at[key_M].add(1)[:E]
    starts_E = jnp.cumsum(sizes_E) - sizes_E
    rank_M = position_M - jnp.concatenate([starts_E, jnp.array([M], jnp.int32)])[key_M]
    if capacity is None:
        G = grouped_tiles(M, E, tile)
        tiles_E = (sizes_E + tile - 1) // tile
        tile_ends_E = jnp.cumsum(tiles_E)
        first_tile_M = jnp.concatenate([tile_ends_E - tiles_E, jnp.array([G], jnp.int32)])[key_M]
        kept_M = keep_M
        row_M = tile * first_tile_M + rank_M
        tiles_G = jnp.arange(G, dtype=jnp.int32)
        tile_expert_G = jnp.minimum(jnp.searchsorted(tile_ends_E, tiles_G, side="right"), E - 1)
    else:
        G = E
        kept_M = keep_M & (rank_M < capacity)
        row_M = key_M * capacity + rank_M
        tile_expert_G = jnp.arange(E, dtype=jnp.int32)
    row_M = jnp.where(kept_M, row_M, G * tile).astype(jnp.int32)
    return row_M, kept_M, tile_expert_G.astype(jnp.int32), sizes_E


def tile_matmul(x_GxCxI: jax.Array, w_ExIxO: jax.Array, tile_expert_G: jax.Array) -> jax.Array:
    """``x[g] @ w[tile_expert_G[g]]`` for every tile g: a batched matmul over gathered weights.

    Checkpointed: the backward pass gathers the tiles' weights again rather than keeping the
    G x I x O copy alive (a gather, no FLOPs; the matmul itself is not redone).
    """

    @jax.checkpoint
    def gathered(x_GxCxI: jax.Array, w_ExIxO: jax.Array, tile_expert_G: jax.Array) -> jax.Array:
        w_GxIxO = jnp.take(w_ExIxO, tile_expert_G, axis=0, mode="clip")
        return jnp.einsum("gci,gio->gco", x_GxCxI, w_GxIxO)

    return gathered(x_GxCxI, w_ExIxO, tile_expert_G)


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
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
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

    # ------------------------------------------------------------------ the stages

    def route(self, x_NxD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Router probabilities (NxE, f32), chosen experts (Nxk) and their weights (Nxk)."""
        probs_NxE = jax.nn.softmax(self.router(x_NxD.astype(jnp.float32)), axis=-1)
        top_w_Nxk, top_e_Nxk = jax.lax.top_k(probs_NxE, self.k)
        if self.norm_topk_prob:
            top_w_Nxk = top_w_Nxk / jnp.sum(top_w_Nxk, axis=-1, keepdims=True)
        return probs_NxE, top_e_Nxk, top_w_Nxk

    def expert_ffn(self, x: jax.Array, matmul: Matmul) -> jax.Array:
        """The experts' SwiGLU on their rows; ``matmul(x, w_ExIxO)`` picks each row's expert."""
        dt = self.dtype
        gate = matmul(x, self.w_gate[...].astype(dt))
        up = matmul(x, self.w_up[...].astype(dt))
        return matmul(jax.nn.silu(gate) * up, self.w_down[...].astype(dt))

    def experts(
        self, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array, valid_N: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The weighted sum of the chosen experts' outputs, and the fraction of assignments dropped."""
        E, k = self.n_experts, self.k
        N, D = x_NxD.shape
        M = N * k
        # Assignments in k-major order (all first choices, then all second, ...): with a
        # capacity, the order in which they claim their expert's rows.
        expert_M = top_e_Nxk.T.reshape(M)
        token_M = jnp.tile(jnp.arange(N, dtype=jnp.int32), k)
        if self.capacity_factor > 0:
            capacity = max(1, math.ceil(self.capacity_factor * M / E))
            tile = capacity
            keep_M = jnp.tile(valid_N, k)  # padding tokens claim no row
        else:  # dropless: every assignment gets a row, padding tokens' too
            capacity = None
            tile = 1 if self.grouping == "ragged_dot" else dropless_tile(M, E)
            keep_M = jnp.ones((M,), bool)
        row_M, kept_M, tile_expert_G, sizes_E = assign_rows(expert_M, keep_M, E, tile, capacity)
        G = tile_expert_G.shape[0]
        token_P = jnp.full((G * tile,), N, jnp.int32).at[row_M].set(token_M, mode="drop")
        x_PxD = jnp.take(x_NxD.astype(self.dtype), token_P, axis=0, mode="fill", fill_value=0)
        if capacity is not None:  # expert e's C rows are tile e
            matmul: Matmul = partial(jnp.einsum, "eci,eio->eco")
            y_PxD = self.expert_ffn(x_PxD.reshape(E, tile, D), matmul).reshape(-1, D)
        elif self.grouping == "ragged_dot":  # rows sorted by expert, sizes_E of each
            matmul = partial(jax.lax.ragged_dot, group_sizes=sizes_E)
            y_PxD = self.expert_ffn(x_PxD, matmul)
        else:
            matmul = partial(tile_matmul, tile_expert_G=tile_expert_G)
            y_PxD = self.expert_ffn(x_PxD.reshape(G, tile, D), matmul).reshape(-1, D)
        y_MxD = jnp.take(y_PxD, row_M, axis=0, mode="fill", fill_value=0)
        w_kxN = top_w_Nxk.T.astype(self.dtype)
        y_NxD = jnp.einsum("knd,kn->nd", y_MxD.reshape(k, N, D), w_kxN)
        if capacity is None:
            return y_NxD, jnp.zeros((), jnp.float32)
        dropped = 1.0 - jnp.sum(kept_M) / jnp.maximum(jnp.sum(keep_M), 1)
        return y_NxD, dropped.astype(jnp.float32)

    def shared(self, x_NxD: jax.Array) -> jax.Array | None:
        return None if self.shared_expert is None else self.shared_expert(x_NxD)

    # ------------------------------------------------------------------ the forward

    def forward_with_stats(
        self, x_BxTxD: jax.Array, valid_BxT: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The layer's output and its routing statistics over the valid tokens (plain arrays:
        ``counts`` (E) assignments per expert, ``prob_sums`` (E) router probability sums,
        ``tokens``, ``drop_fraction``)."""
        B, T, D = x_BxTxD.shape
        x_NxD = x_BxTxD.reshape(B * T, D)
        valid_N = jnp.ones((B * T,), bool) if valid_BxT is None else valid_BxT.reshape(-1)
        probs_NxE, top_e_Nxk, top_w_Nxk = self.route(x_NxD)
        y_NxD, dropped = self.experts(x_NxD, top_e_Nxk, top_w_Nxk, valid_N)
        shared = self.shared(x_NxD)
        if shared is not None:
            y_NxD = y_NxD + shared
        v_N = valid_N.astype(jnp.float32)
        counts_E = jnp.zeros((self.n_experts,), jnp.float32)
        stats = {
            "counts": counts_E.at[top_e_Nxk.reshape(-1)].add(jnp.repeat(v_N, self.k)),
            "prob_sums": jnp.sum(probs_NxE * v_N[:, None], axis=0),
            "tokens": jnp.sum(v_N),
            "drop_fraction": dropped,
        }
        return y_NxD.reshape(B, T, D).astype(self.dtype), stats

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        return self.forward_with_stats(x_BxTxD)[0]


def group_limited_top_k(
    scores_NxE: jax.Array, k: int, n_groups: int = 1, top_groups: int = 1
) -> jax.Array:
    """The k best experts of each token among its ``top_groups`` best groups (Nxk).

    The E experts form ``n_groups`` consecutive groups, each rated by the sum of its two best
    scores; experts outside the chosen groups cannot be picked. One group: a plain top-k.
    """
    N, E = scores_NxE.shape
    if n_groups > 1 and top_groups < n_groups:
        grouped_NxGxM = scores_NxE.reshape(N, n_groups, E // n_groups)
        group_scores_NxG = jax.lax.top_k(grouped_NxGxM, min(2, E // n_groups))[0].sum(-1)
        _, chosen_Nxg = jax.lax.top_k(group_scores_NxG, top_groups)
        rows = jnp.arange(N)[:, None]
        keep_NxG = jnp.zeros((N, n_groups), bool).at[rows, chosen_Nxg].set(True)
        keep_NxE = jnp.repeat(keep_NxG, E // n_groups, axis=1)
        scores_NxE = jnp.where(keep_NxE, scores_NxE, -jnp.inf)
    return jax.lax.top_k(scores_NxE, k)[1]


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

    def route(self, x_NxD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Sigmoid scores (NxE), the experts chosen with the bias (Nxk), their weights (Nxk):
        the scores without the bias, renormalised, times ``routed_scale``."""
        scores_NxE = jax.nn.sigmoid(self.router(x_NxD.astype(jnp.float32)))
        choice_NxE = scores_NxE + jax.lax.stop_gradient(self.router_bias[...])
        top_e_Nxk = group_limited_top_k(choice_NxE, self.k, self.n_groups, self.top_groups)
        top_w_Nxk = jnp.take_along_axis(scores_NxE, top_e_Nxk, axis=-1)
        if self.norm_topk_prob:
            top_w_Nxk = top_w_Nxk / (jnp.sum(top_w_Nxk, axis=-1, keepdims=True) + 1e-20)
        return scores_NxE, top_e_Nxk, top_w_Nxk * self.routed_scale

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
