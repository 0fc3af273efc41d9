"""The MoE layer computes routed tokens only: equal to running every expert on every token,
at the routed FLOPs (compiled ``cost_analysis``), with the capacity path and the router-health
statistics kept.

Tolerances come from the sums: reordering a float32 sum of n terms moves it by at most
``(n - 1) * u * sum|terms|`` (u = 2^-24). ``sum_bound`` carries that through the expert
SwiGLU (sums over D, then F, then the k chosen experts) for the outputs; the gradients,
sums over the N x k assignments as well, get ``u * (N k + D + F) * max|gradient|`` times 2.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from theseus.models.errors import ModelError
from theseus.models.layers.moe import MoE, dropless_tile
from theseus.models.qwen3_moe.model import Qwen3Moe

from tests.models.conftest import VOCAB, tiny

U = 2.0**-24  # float32 unit roundoff


# ---------------------------------------------------------------- references (the old layer)


def dense_experts(moe: MoE, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array):
    """The former dropless path: every expert on every token, unchosen experts weighted 0."""
    E = moe.n_experts
    gates_NxE = jnp.sum(jax.nn.one_hot(top_e_Nxk, E) * top_w_Nxk[..., None], axis=1)
    x_ExNxD = jnp.broadcast_to(x_NxD[None], (E, *x_NxD.shape))
    gate_ExNxF = jnp.einsum("end,edf->enf", x_ExNxD, moe.w_gate[...])
    up_ExNxF = jnp.einsum("end,edf->enf", x_ExNxD, moe.w_up[...])
    y_ExNxD = jnp.einsum("enf,efd->end", jax.nn.silu(gate_ExNxF) * up_ExNxF, moe.w_down[...])
    return jnp.einsum("ne,end->nd", gates_NxE, y_ExNxD)


def capacity_experts(
    moe: MoE, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array, valid_N: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The former capacity path: one-hot dispatch and combine tensors (N x E x C)."""
    E, k = moe.n_experts, moe.k
    N = x_NxD.shape[0]
    capacity = max(1, math.ceil(moe.capacity_factor * N * k / E))
    gates_NxE = jnp.sum(jax.nn.one_hot(top_e_Nxk, E) * top_w_Nxk[..., None], axis=1)
    chosen_kxNxE = jnp.swapaxes(jax.nn.one_hot(top_e_Nxk, E, dtype=jnp.int32), 0, 1)
    chosen_kxNxE = chosen_kxNxE * valid_N[None, :, None].astype(jnp.int32)
    slot_kxNxE = jnp.cumsum(chosen_kxNxE.reshape(-1, E), axis=0).reshape(chosen_kxNxE.shape) - 1
    kept_kxNxE = chosen_kxNxE * (slot_kxNxE < capacity)
    slots_kxNxE = jnp.where(kept_kxNxE > 0, slot_kxNxE, -1)
    dispatch_NxExC = jnp.sum(jax.nn.one_hot(slots_kxNxE, capacity), 0)
    x_ExCxD = jnp.einsum("nec,nd->ecd", dispatch_NxExC, x_NxD)
    gate = jnp.einsum("ecd,edf->ecf", x_ExCxD, moe.w_gate[...])
    up = jnp.einsum("ecd,edf->ecf", x_ExCxD, moe.w_up[...])
    y_ExCxD = jnp.einsum("ecf,efd->ecd", jax.nn.silu(gate) * up, moe.w_down[...])
    y_NxD = jnp.einsum("nec,ecd->nd", dispatch_NxExC * gates_NxE[..., None], y_ExCxD)
    dropped = 1.0 - jnp.sum(kept_kxNxE) / jnp.maximum(jnp.sum(chosen_kxNxE), 1)
    return y_NxD, dropped


class DenseMoE(MoE):
    """The layer as it was: dropless by running every expert on every token."""

    def experts(self, x_NxD, top_e_Nxk, top_w_Nxk, valid_N):
        return dense_experts(self, x_NxD, top_e_Nxk, top_w_Nxk), jnp.zeros((), jnp.float32)


class DenseQwen3Moe(Qwen3Moe):
    moe_cls = DenseMoE


def sum_bound(moe: MoE, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array):
    """First-order bound (NxD) on how far reordering the float32 sums moves each output.

    gate = x Wg and up = x Wu are sums of D terms: |dgate| <= D u (|x| |Wg|), likewise up.
    h = silu(gate) up, |silu'| <= 1.1: |dh| <= D u H with H = 1.1 |x||Wg| |up| + |silu(gate)|
    |x||Wu|. y_e = h Wd sums F terms; the output sums k weighted y_e. So
    |dy| <= u sum_k w (D H|Wd| + F |h||Wd| + k |y_e|).
    """
    D = x_NxD.shape[-1]
    F = moe.w_gate.shape[-1]
    k = moe.k
    wg, wu, wd = (w[...][top_e_Nxk] for w in (moe.w_gate, moe.w_up, moe.w_down))  # Nxk x..
    gate = jnp.einsum("nd,nkdf->nkf", x_NxD, wg)
    up = jnp.einsum("nd,nkdf->nkf", x_NxD, wu)
    h = jax.nn.silu(gate) * up
    y = jnp.einsum("nkf,nkfd->nkd", h, wd)
    mag_gate = jnp.einsum("nd,nkdf->nkf", jnp.abs(x_NxD), jnp.abs(wg))
    mag_up = jnp.einsum("nd,nkdf->nkf", jnp.abs(x_NxD), jnp.abs(wu))
    H = 1.1 * mag_gate * jnp.abs(up) + jnp.abs(jax.nn.silu(gate)) * mag_up
    per_expert = (
        D * jnp.einsum("nkf,nkfd->nkd", H, jnp.abs(wd))
        + F * jnp.einsum("nkf,nkfd->nkd", jnp.abs(h), jnp.abs(wd))
        + k * jnp.abs(y)
    )
    return U * jnp.einsum("nk,nkd->nd", jnp.abs(top_w_Nxk), per_expert)


def layer(grouping: str = "tiles", capacity_factor: float = 0.0, **kw: Any) -> MoE:
    D, F, E, k = kw.pop("D", 32), kw.pop("F", 24), kw.pop("E", 8), kw.pop("k", 2)
    return MoE(
        D,
        F,
        E,
        k,
        grouping=grouping,
        capacity_factor=capacity_factor,
        std=D**-0.5,
        rngs=nnx.Rngs(params=0),
        **kw,
    )


def assert_ties_free(moe: MoE, x_NxD: jax.Array) -> None:
    """The k-th and (k+1)-th router probabilities differ: the routing is not on a knife edge."""
    probs_NxE, _, _ = moe.route(x_NxD)
    sorted_NxE = jnp.sort(probs_NxE, axis=-1)[:, ::-1]
    assert float(jnp.min(sorted_NxE[:, moe.k - 1] - sorted_NxE[:, moe.k])) > 1e-6


def flops(compiled: Any) -> float:
    """``cost_analysis()`` FLOPs: a dict in jax 0.10 (a list of one dict in older versions)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return float(cost["flops"])


# ---------------------------------------------------------------- equality with the dense path


@pytest.mark.parametrize(
    ("grouping", "tokens"),
    [("tiles", 256), ("tiles", 24), ("ragged_dot", 256), ("grouped", 256)],
    ids=["tiles", "tiles-of-one-row", "ragged_dot", "grouped"],
)
def test_routed_dropless_equals_every_expert_on_every_token(grouping, tokens):
    D, F, E, k = 32, 24, 8, 2
    moe = layer(grouping, D=D, F=F, E=E, k=k)
    x_NxD = jax.random.normal(jax.random.key(1), (tokens, D))
    cot_NxD = jax.random.normal(jax.random.key(2), (tokens, D))
    assert_ties_free(moe, x_NxD)
    if grouping == "tiles":  # both the tile of one row and tiles of several are covered
        assert (dropless_tile(tokens * k, E) > 1) == (tokens == 256)
    routed_def, state = nnx.split(moe)
    dense_def = nnx.graphdef(DenseMoE(D, F, E, k, rngs=nnx.Rngs(params=0)))

    @jax.jit
    def outputs(state: nnx.State, x_NxD: jax.Array) -> tuple[jax.Array, ...]:
        moe = nnx.merge(routed_def, state)
        _, top_e, top_w = moe.route(x_NxD)
        y_routed = moe.experts(x_NxD, top_e, top_w, jnp.ones((tokens,), bool))[0]
        y_dense = dense_experts(moe, x_NxD, top_e, top_w)
        return y_routed, y_dense, sum_bound(moe, x_NxD, top_e, top_w)

    y_routed, y_dense, bound = outputs(state, x_NxD)
    error = jnp.abs(y_routed - y_dense)
    assert float(jnp.max(error / bound)) <= 2.0, float(jnp.max(error))
    assert float(jnp.max(jnp.abs(y_dense))) > 0.1  # outputs of a useful size

    def loss(graphdef: nnx.GraphDef, state: nnx.State, x_NxD: jax.Array) -> jax.Array:
        return jnp.sum(nnx.merge(graphdef, state)(x_NxD[None])[0] * cot_NxD)

    grad = jax.jit(jax.grad(loss, argnums=(1, 2)), static_argnums=0)
    g_routed, g_dense = grad(routed_def, state, x_NxD), grad(dense_def, state, x_NxD)
    n_terms = tokens * k + D + F
    for (path, a), (_, b) in zip(
        jax.tree_util.tree_leaves_with_path(g_routed),
        jax.tree_util.tree_leaves_with_path(g_dense),
        strict=True,
    ):
        tol = 2 * U * n_terms * float(jnp.max(jnp.abs(b)))
        assert float(jnp.max(jnp.abs(a - b))) <= tol, (jax.tree_util.keystr(path), tol)
        assert float(jnp.max(jnp.abs(b))) > 0, path  # every expert and the router get gradient


def test_capacity_path_equals_the_one_hot_dispatch_and_reports_drops():
    moe = layer(capacity_factor=0.5)
    N = 64
    x_NxD = jax.random.normal(jax.random.key(3), (N, 32))
    valid_N = jnp.arange(N) < 50  # padding tokens claim no capacity
    graphdef, state = nnx.split(moe)

    @jax.jit
    def outputs(state: nnx.State, x_NxD: jax.Array) -> tuple[jax.Array, ...]:
        moe = nnx.merge(graphdef, state)
        _, top_e, top_w = moe.route(x_NxD)
        y, dropped = moe.experts(x_NxD, top_e, top_w, valid_N)
        y_ref, dropped_ref = capacity_experts(moe, x_NxD, top_e, top_w, valid_N)
        return y, dropped, y_ref, dropped_ref, sum_bound(moe, x_NxD, top_e, top_w)

    y, dropped, y_ref, dropped_ref, bound = outputs(state, x_NxD)
    assert 0.2 < float(dropped) < 0.8
    assert float(dropped) == pytest.approx(float(dropped_ref), abs=1e-7)
    assert float(jnp.max(jnp.abs(y - y_ref) / bound)) <= 2.0
    assert float(jnp.max(jnp.abs(y[50:]))) == 0.0  # padding tokens: dropped, output zero


def test_unknown_grouping_is_a_model_error():
    with pytest.raises(ModelError, match="moe_grouping='dense'"):
        layer("dense")


# ---------------------------------------------------------------- compiled FLOPs = routed FLOPs


def test_moe_layer_compiles_to_the_routed_flops():
    D, F, E, k, N = 64, 32, 16, 2, 512
    routed = 2 * N * D * E + 2 * N * k * 3 * D * F  # router + the k chosen SwiGLUs
    ratios = {}
    for name, moe in [
        ("routed", layer(D=D, F=F, E=E, k=k)),
        ("dense", DenseMoE(D, F, E, k, rngs=nnx.Rngs(0))),
    ]:
        graphdef, state = nnx.split(moe)
        x = jnp.ones((1, N, D))

        def forward(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array) -> jax.Array:
            return nnx.merge(graphdef, state)(x)

        def loss(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array) -> jax.Array:
            return jnp.sum(forward(graphdef, state, x) ** 2)

        fwd = jax.jit(forward, static_argnums=0).lower(graphdef, state, x).compile()
        grad = jax.jit(jax.grad(loss, argnums=(1, 2)), static_argnums=0)
        train = grad.lower(graphdef, state, x).compile()
        ratios[name] = (flops(fwd) / routed, flops(train) / (3 * routed))
    assert all(0.8 <= r <= 1.3 for r in ratios["routed"]), ratios
    assert all(r > 4.0 for r in ratios["dense"]), ratios  # E / k = 8 times the expert FLOPs


def test_tiny_model_train_step_compiles_to_flops_per_token():
    B, T = 2, 32
    overrides = {"n_experts": 16}  # E / k = 8: the dense path stands out
    routed = tiny("qwen3_moe", **overrides)
    config = routed.config
    dense = DenseQwen3Moe(config, rngs=nnx.Rngs(params=0))
    tokens_BxT = jax.random.randint(jax.random.key(0), (B, T), 1, VOCAB)
    analytic = routed.flops_per_token(T) * B * T
    ratios = {}
    for name, model in [("routed", routed), ("dense", dense)]:
        # a scan's cost analysis counts its body once: unroll the layers to count them all
        graphdef, params = nnx.split(model.unrolled())

        def loss(graphdef: nnx.GraphDef, params: nnx.State, tokens_BxT: jax.Array) -> jax.Array:
            logits, aux = nnx.merge(graphdef, params).forward_with_aux(tokens_BxT)
            return jnp.mean(logits) + aux["moe_load_balance"]

        grad = jax.jit(jax.grad(loss, argnums=1), static_argnums=0)
        step = grad.lower(graphdef, params, tokens_BxT).compile()
        ratios[name] = flops(step) / analytic
    assert 0.8 <= ratios["routed"] <= 1.3, ratios
    assert ratios["dense"] > 2.0, ratios


# ---------------------------------------------------------------- router health


def aux_of(model: Qwen3Moe, tokens_BxT: jax.Array) -> tuple[dict, dict]:
    """``forward_with_stats``' aux and statistics, jitted."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def run(state: nnx.State) -> tuple[dict, dict]:
        _, aux, summary, _ = nnx.merge(graphdef, state).forward_with_stats(tokens_BxT)
        return aux, summary

    return run(state)


def test_aux_has_the_weighted_loss_and_unweighted_stats():
    x = jax.random.randint(jax.random.key(0), (2, 16), 1, VOCAB)
    model = tiny("qwen3_moe")
    aux, summary = aux_of(model, x)
    assert set(aux) == {
        "moe_load_balance",
        "stat/moe_load_balance",
        "stat/moe_drop_fraction",
        "stat/moe_max_load",
        "stat/moe_min_load",
    }
    assert all(v.shape == () for v in aux.values())
    coef = model.config.router_aux_loss_coef
    assert float(aux["moe_load_balance"]) == pytest.approx(
        coef * float(aux["stat/moe_load_balance"])
    )
    assert float(aux["stat/moe_drop_fraction"]) == 0.0
    assert 0.0 <= float(aux["stat/moe_min_load"]) <= 1.0 <= float(aux["stat/moe_max_load"])
    assert float(aux["stat/moe_max_load"]) <= model.config.n_experts
    assert float(summary["moe_max_load"]) == float(aux["stat/moe_max_load"])
    tight_aux, _ = aux_of(tiny("qwen3_moe", capacity_factor=0.25), x)
    assert float(tight_aux["stat/moe_drop_fraction"]) > 0.5

    graphdef, params = nnx.split(model)

    @jax.jit
    @jax.grad
    def stats_only(params: nnx.State) -> jax.Array:
        aux = nnx.merge(graphdef, params).forward_with_aux(x)[1]
        return sum(v for name, v in aux.items() if name.startswith("stat/"))

    grads = stats_only(params)
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(grads))


def test_load_extremes_read_per_layer():
    model = tiny("qwen3_moe")
    E = model.config.n_experts
    stats = {
        "counts": jnp.array([[4.0, 3.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]]),  # LxE: 4 tokens, k=2
        "prob_sums": jnp.ones((2, E)),
        "tokens": jnp.array([4.0, 4.0]),
        "drop_fraction": jnp.array([0.0, 0.5]),
    }
    _, summary = model.aux_losses(stats)
    assert float(summary["moe_max_load"]) == 2.0  # layer 0: expert 0 takes half of 8
    assert float(summary["moe_min_load"]) == 0.0
    assert float(summary["moe_drop_fraction"]) == 0.25
