"""Parameters set by a rule rather than by the loss: the router biases of aux-loss-free balancing.

DeepSeek-V3 balances its experts without an auxiliary loss: each MoE layer adds a per-expert
bias to the router scores before choosing the top-k (the mixing weights do not see it), and
after every step moves each expert's bias by a fixed ``update_rate`` against its load:
``b_e += rate * sign(mean load - load_e)``. The loss never differentiates the bias.

Here such a bias is a :class:`BalanceBias` parameter (checkpointed, sharded and exported
like any other) with its rate in the variable's metadata. Its *gradient slot* carries the
statistic the rule needs: the model adds a term that is zero in value and whose gradient
with respect to the bias is a small positive multiple of ``load_e - mean load`` (see
the sigmoid-routed MoE layer of the models package). That way the train step's micro-batch
accumulation and the mesh's gradient reduction average the loads exactly as they average
gradients, with no change to the step. :func:`with_balance_biases` then gives those leaves
the rule's update instead of the optimizer's, and hides them from the optimizer (a zero
gradient: no moment, no clipping share, no weight decay).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx


class BalanceBias(nnx.Param):
    """A parameter moved by ``-update_rate * sign(gradient)`` (its metadata), not by the
    optimizer; its gradient carries ``load - mean load``, never a derivative of the loss."""


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def balance_rates(tree: Any) -> list[float | None]:
    """The update rate of each array leaf of ``tree`` (params, gradients or updates), in
    ``jax.tree.leaves`` order: a BalanceBias's ``update_rate``, else None."""
    rates: list[float | None] = []
    for node in jax.tree.leaves(tree, is_leaf=_is_variable):
        rate = float(node.get_metadata()["update_rate"]) if isinstance(node, BalanceBias) else None
        rates += [rate] * len(jax.tree.leaves(node))
    return rates


def with_balance_biases(transform: optax.GradientTransformation) -> optax.GradientTransformation:
    """``transform`` for every parameter but the :class:`BalanceBias` ones, which move by
    ``-rate * sign(carried load - mean)`` (a model without them: ``transform`` unchanged)."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        rates = balance_rates(updates)
        if all(rate is None for rate in rates):
            return transform.update(updates, state, params)
        leaves, treedef = jax.tree.flatten(updates)
        hidden = [
            g if rate is None else jnp.zeros_like(g) for g, rate in zip(leaves, rates, strict=True)
        ]
        inner, state = transform.update(jax.tree.unflatten(treedef, hidden), state, params)
        out = [
            u if rate is None else (-rate * jnp.sign(g)).astype(u.dtype)
            for u, g, rate in zip(jax.tree.leaves(inner), leaves, rates, strict=True)
        ]
        return jax.tree.unflatten(treedef, out), state

    return optax.GradientTransformation(transform.init, update)
