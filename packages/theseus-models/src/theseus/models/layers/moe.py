"""Mixture of SwiGLU experts with a top-k softmax router.

Stages: ``route`` (router logits -> top-k experts and weights), ``experts`` (dropless: every
expert on every token, unselected weights zero; or with a capacity: tokens past an expert's
capacity are dropped and the drop fraction reported), ``shared`` (an always-on expert).
``forward_with_stats`` also returns what the load-balancing loss needs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.layers.linear import Linear, param
from theseus.models.layers.mlp import SwiGLU


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
        self.dtype = dtype

    # ------------------------------------------------------------------ the stages

    def route(self, x_NxD: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Router probabilities (NxE, f32), chosen experts (Nxk) and their weights (Nxk)."""
        probs_NxE = jax.nn.softmax(self.router(x_NxD.astype(jnp.float32)), axis=-1)
        top_w_Nxk, top_e_Nxk = jax.lax.top_k(probs_NxE, self.k)
        if self.norm_topk_prob:
            top_w_Nxk = top_w_Nxk / jnp.sum(top_w_Nxk, axis=-1, keepdims=True)
        return probs_NxE, top_e_Nxk, top_w_Nxk

    def expert_ffn(self, x_ExCxD: jax.Array) -> jax.Array:
        """Each expert's SwiGLU on its own tokens."""
        dt = self.dtype
        gate = jnp.einsum("ecd,edf->ecf", x_ExCxD, self.w_gate[...].astype(dt))
        up = jnp.einsum("ecd,edf->ecf", x_ExCxD, self.w_up[...].astype(dt))
        return jnp.einsum("ecf,efd->ecd", jax.nn.silu(gate) * up, self.w_down[...].astype(dt))

    def experts(
        self, x_NxD: jax.Array, top_e_Nxk: jax.Array, top_w_Nxk: jax.Array, valid_N: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The weighted sum of the chosen experts' outputs, and the fraction of assignments dropped."""
        E = self.n_experts
        N = x_NxD.shape[0]
        x = x_NxD.astype(self.dtype)
        gates_NxE = jnp.sum(jax.nn.one_hot(top_e_Nxk, E) * top_w_Nxk[..., None], axis=1)
        if self.capacity_factor <= 0:  # dropless: all experts see all tokens
            y_ExNxD = self.expert_ffn(jnp.broadcast_to(x[None], (E, *x.shape)))
            y = jnp.einsum("ne,end->nd", gates_NxE.astype(self.dtype), y_ExNxD)
            return y, jnp.zeros((), jnp.float32)
        capacity = max(1, math.ceil(self.capacity_factor * N * self.k / E))
        # Slot of each assignment in its expert's buffer: first choices first, then token order.
        chosen_kxNxE = jnp.swapaxes(jax.nn.one_hot(top_e_Nxk, E, dtype=jnp.int32), 0, 1)
        chosen_kxNxE = chosen_kxNxE * valid_N[None, :, None].astype(jnp.int32)
        slot_kxNxE = jnp.cumsum(chosen_kxNxE.reshape(-1, E), axis=0).reshape(chosen_kxNxE.shape) - 1
        kept_kxNxE = chosen_kxNxE * (slot_kxNxE < capacity)
        dispatch_NxExC = jnp.sum(
            jax.nn.one_hot(jnp.where(kept_kxNxE > 0, slot_kxNxE, -1), capacity, dtype=self.dtype), 0
        )
        x_ExCxD = jnp.einsum("nec,nd->ecd", dispatch_NxExC, x)
        y_ExCxD = self.expert_ffn(x_ExCxD)
        combine_NxExC = dispatch_NxExC * gates_NxE[..., None].astype(self.dtype)
        y = jnp.einsum("nec,ecd->nd", combine_NxExC, y_ExCxD)
        assigned = jnp.maximum(jnp.sum(chosen_kxNxE), 1)
        dropped = 1.0 - jnp.sum(kept_kxNxE) / assigned
        return y, dropped.astype(jnp.float32)

    def shared(self, x_NxD: jax.Array) -> jax.Array | None:
        return None if self.shared_expert is None else self.shared_expert(x_NxD)

    # ------------------------------------------------------------------ the forward

    def forward_with_stats(
        self, x_BxTxD: jax.Array, valid_BxT: jax.Array | None = None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        B, T, D = x_BxTxD.shape
        x_NxD = x_BxTxD.reshape(B * T, D)
        valid_N = jnp.ones((B * T,), bool) if valid_BxT is None else valid_BxT.reshape(-1)
        probs_NxE, top_e, top_w = self.route(x_NxD)
        y, dropped = self.experts(x_NxD, top_e, top_w, valid_N)
        shared = self.shared(x_NxD)
        if shared is not None:
            y = y + shared
        v = valid_N.astype(jnp.float32)
        stats = {
            "counts": jnp.sum(
                jax.nn.one_hot(top_e, self.n_experts) * v[:, None, None], axis=(0, 1)
            ),
            "prob_sums": jnp.sum(probs_NxE * v[:, None], axis=0),
            "tokens": jnp.sum(v),
            "drop_fraction": dropped,
        }
        return y.reshape(B, T, D).astype(self.dtype), stats

    def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
        return self.forward_with_stats(x_BxTxD)[0]
