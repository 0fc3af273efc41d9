"""The jitted training and evaluation steps.

State is a plain pytree ``{"params", "opt_state", "step", "skipped"}``; the model's graph
definition is static. The step scans over micro-batches (gradient accumulation inside the
step) and sums per-token losses, so the result is the mean over every unmasked token of the
global batch whatever the number of micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from theseus.core.model import STAT_PREFIX

Batch = dict[str, jax.Array]


def token_losses(logits_BxTxV: jax.Array, targets_BxT: jax.Array) -> jax.Array:
    """Cross entropy per token, in float32."""
    logits = logits_BxTxV.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxT)


def summed_loss(
    graphdef: nnx.GraphDef, params: Any, rest: Any, batch: Batch, remat: str = "none"
) -> tuple[jax.Array, Any]:
    """Sum of masked token losses (plus aux losses scaled by the token count), and
    ``(cross-entropy sum, token count, model metrics)``.

    The model's ``aux`` entries are weighted losses added to the training loss, except those
    named ``stat/...`` (router health and the like), which are only reported. Every entry is
    returned in the model metrics, to be logged as ``model/<name>``.
    """
    model = nnx.merge(graphdef, params, rest)
    if remat != "none":
        from theseus.core.sharding.remat import checkpoint_blocks

        checkpoint_blocks(model, remat)
    logits, aux = model.forward_with_aux(
        batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
    )
    mask = batch["loss_mask"].astype(jnp.float32)
    ce_sum = jnp.sum(token_losses(logits, batch["targets"]) * mask)
    count = jnp.sum(mask)
    losses = [value for name, value in aux.items() if not name.startswith(STAT_PREFIX)]
    aux_total = sum(losses) if losses else jnp.zeros((), jnp.float32)
    model_metrics = {name: jnp.asarray(value, jnp.float32) for name, value in aux.items()}
    return ce_sum + aux_total * count, (ce_sum, count, model_metrics)


def split_micro(batch: Batch, micro_steps: int) -> Batch:
    return jax.tree.map(lambda x: x.reshape(micro_steps, -1, *x.shape[1:]), batch)


def make_train_step(
    graphdef: nnx.GraphDef,
    rest: Any,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    micro_steps: int,
    skip_nonfinite: bool,
    *,
    micro_sharding: Any = None,
    grad_shardings: Any = None,
    remat: str = "none",
) -> Callable[[dict, Batch], tuple[dict, dict]]:
    """``step(state, batch) -> (state, metrics)``, to be jitted with the state donated.

    On a mesh, ``micro_sharding`` keeps each micro-batch split over the batch axes and
    ``grad_shardings`` lays the summed gradients out like the optimizer state.
    """
    grad_fn = jax.grad(lambda p, b: summed_loss(graphdef, p, rest, b, remat), has_aux=True)

    def constrain(tree: Any, shardings: Any) -> Any:
        return tree if shardings is None else jax.lax.with_sharding_constraint(tree, shardings)

    def step(state: dict, batch: Batch) -> tuple[dict, dict]:
        params = state["params"]

        def accumulate(carry: Any, micro: Batch) -> tuple[Any, None]:
            grads_sum, ce_sum, count = carry
            grads, (ce, n, model_metrics) = grad_fn(params, micro)
            grads_sum = jax.tree.map(jnp.add, grads_sum, constrain(grads, grad_shardings))
            return (grads_sum, ce_sum + ce, count + n), model_metrics

        zero = jnp.zeros((), jnp.float32)
        init = (constrain(jax.tree.map(jnp.zeros_like, params), grad_shardings), zero, zero)
        if micro_steps == 1:
            grads_sum, (ce_sum, count, model_metrics) = grad_fn(params, batch)
        else:
            micro = constrain(split_micro(batch, micro_steps), micro_sharding)
            (grads_sum, ce_sum, count), per_micro = jax.lax.scan(accumulate, init, micro)
            model_metrics = jax.tree.map(lambda m: jnp.mean(m, axis=0), per_micro)
        grads_sum = constrain(grads_sum, grad_shardings)
        denominator = jnp.maximum(count, 1.0)
        grads = jax.tree.map(lambda g: g / denominator, grads_sum)
        loss = ce_sum / denominator
        updates, opt_state = optimizer.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        skipped = state["skipped"]
        if skip_nonfinite:
            finite = jnp.isfinite(loss) & jnp.isfinite(optax.global_norm(updates))
            keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
            new_params = jax.tree.map(keep, new_params, params)
            opt_state = jax.tree.map(keep, opt_state, state["opt_state"])
            skipped = skipped + jnp.where(finite, 0, 1).astype(skipped.dtype)
        metrics = {
            "loss": loss,
            "grad_norm": optax.global_norm(grads),
            "learning_rate": schedule(state["step"]),
            "skipped": skipped,
            "model": model_metrics,
        }
        new_state = {
            "params": new_params,
            "opt_state": opt_state,
            "step": state["step"] + 1,
            "skipped": skipped,
        }
        return new_state, metrics

    return step


def make_eval_step(
    graphdef: nnx.GraphDef, rest: Any
) -> Callable[[Any, Batch], tuple[jax.Array, jax.Array]]:
    """``eval_step(params, batch) -> (summed loss, token count)``."""

    def eval_step(params: Any, batch: Batch) -> tuple[jax.Array, jax.Array]:
        _, (ce_sum, count, _) = summed_loss(graphdef, params, rest, batch)
        return ce_sum, count

    return eval_step
