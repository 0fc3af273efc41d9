"""The jitted training and evaluation steps.

The state is a :class:`~theseus.core.train.state.TrainState`; the graph definition is
static. The step scans over micro-batches (gradient accumulation inside the
step) and sums per-token losses, so the result is the mean over every unmasked token of the
global batch whatever the number of micro-batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from theseus.core.adapters import dropout_key
from theseus.core.model import STAT_PREFIX
from theseus.core.train.chunked_loss import chunked_cross_entropy
from theseus.core.train.head_gather import gather_head
from theseus.core.train.recipe import Objective
from theseus.core.train.sharded_loss import per_shard_cross_entropy
from theseus.core.train.state import TrainState

Batch = Mapping[str, jax.Array]


def token_losses(logits_BxTxV: jax.Array, targets_BxT: jax.Array) -> jax.Array:
    """Cross entropy per token, in float32."""
    logits = logits_BxTxV.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxT)


def merged_model(graphdef: nnx.GraphDef, params: Any, rest: Any, frozen: Any = None) -> Any:
    """The model of ``params`` and ``frozen`` (its execution plan, remat level included, is
    part of ``graphdef``)."""
    # fresh variables (same values): flax's scan wants every variable of the model created
    # at the trace level the forward pass runs at, and frozen weights come from outside it
    params, frozen, rest = jax.tree.map(lambda x: x, (params, frozen or nnx.State({}), rest))
    return nnx.merge(graphdef, params, frozen, rest)


@dataclass(frozen=True)
class Forward:
    """The step's forward pass (its blocks checkpointed as the plan in ``graphdef`` says):
    what a recipe's objective is built on (``train.recipe.ModelFn``). Dropout (in adapters)
    draws from ``key`` when one is given."""

    graphdef: Any
    rest: Any
    batch_shards: int = 1
    loss_chunks: int = 0  # training.loss_chunks (0: auto)

    def __call__(self, params: Any, frozen: Any, batch: Batch, key: Any) -> tuple[Any, dict]:
        """``(logits_BxTxV, aux)`` of the model made of ``params`` and ``frozen``."""
        model = merged_model(self.graphdef, params, self.rest, frozen)
        with dropout_key(key):
            return model.forward_with_aux(
                batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
            )

    def final(self, params: Any, frozen: Any, batch: Batch, key: Any) -> tuple[Any, Any, dict]:
        """``(model, hidden_BxTxD, aux)``: the model and its final hidden states, for a loss
        that runs its head itself."""
        model = merged_model(self.graphdef, params, self.rest, frozen)
        with dropout_key(key):
            hidden, aux = model.hidden_with_aux(
                batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
            )
        return model, hidden, aux

    def hidden(self, params: Any, frozen: Any, batch: Batch, key: Any) -> tuple[Any, Any, dict]:
        """``(hidden_BxTxD, head, aux)``: the final hidden states and the output head, for
        a loss that takes its logits a few positions at a time."""
        model, hidden, aux = self.final(params, frozen, batch, key)
        gather_head(model)  # once, not once per piece
        return hidden, model.head, aux


def summed_loss(
    forward: Forward,
    params: Any,
    batch: Batch,
    frozen: Any = None,
    key: jax.Array | None = None,
    chunks: int = 1,
) -> tuple[jax.Array, Any]:
    """Sum of masked token losses (plus aux losses scaled by the token count), and
    ``(cross-entropy sum, token count, model metrics)``.

    The model's ``aux`` entries are weighted losses added to the training loss, except those
    named ``stat/...`` (router health and the like), which are only reported. Every entry is
    returned in the model metrics, to be logged as ``model/<name>``. ``chunks`` > 1 runs the
    output head and the loss over that many pieces of the sequence, one at a time
    (``chunked_loss``), for a model with ``hidden_with_aux`` and ``head``.
    """
    mask = batch["loss_mask"].astype(jnp.float32)
    if chunks > 1:
        model, hidden, aux = forward.final(params, frozen, batch, key)
        ce_sum = pieces_loss(model, hidden, batch["targets"], mask, chunks)
    else:
        logits, aux = forward(params, frozen, batch, key)
        ce_sum = jnp.sum(token_losses(logits, batch["targets"]) * mask)
    count = jnp.sum(mask)
    losses = [value for name, value in aux.items() if not name.startswith(STAT_PREFIX)]
    aux_total = sum(losses) if losses else jnp.zeros((), jnp.float32)
    model_metrics = {name: jnp.asarray(value, jnp.float32) for name, value in aux.items()}
    return ce_sum + aux_total * count, (ce_sum, count, model_metrics)


def pieces_loss(
    model: Any, hidden_BxTxD: jax.Array, targets_BxT: jax.Array, mask_BxT: jax.Array, chunks: int
) -> jax.Array:
    """The cross-entropy sum of ``model``'s head in ``chunks`` pieces: on each device's rows
    where the layout allows (``sharded_loss``: the head's gradient reduce-scattered once),
    else with the head gathered whole before the pieces (``head_gather``)."""
    total = per_shard_cross_entropy(model, hidden_BxTxD, targets_BxT, mask_BxT, chunks)
    if total is not None:
        return total
    gather_head(model)  # once, not once per piece
    return chunked_cross_entropy(model.head, hidden_BxTxD, targets_BxT, mask_BxT, chunks)


# An objective (``train/recipe.py``) returns what a step differentiates (``total``) and
# reports (``loss sum / count``); metrics named ``train/...`` are logged as they are, others
# as ``model/<name>``.
TRAIN_PREFIX = "train/"


def cross_entropy(graphdef: nnx.GraphDef, rest: Any, chunks: int = 1) -> Objective:
    """Next-token cross entropy summed over the unmasked tokens (pretraining, SFT), its
    logits taken ``chunks`` pieces of the sequence at a time."""

    forward = Forward(graphdef, rest)

    def objective(params: Any, frozen: Any, batch: Batch, key: Any) -> tuple[jax.Array, Any]:
        return summed_loss(forward, params, batch, frozen, key, chunks)

    return objective


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
    dropout_seed: int | None = None,
    objective: Objective | None = None,
    loss_chunks: int = 1,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict]]:
    """``step(state, batch) -> (state, metrics)``, to be jitted with the state donated.

    ``state.params`` are the trained parameters (every parameter, or only the adapters of a
    LoRA run); ``state.frozen`` the others, passed through untouched. On a mesh,
    ``micro_sharding`` keeps each micro-batch split over the batch axes and
    ``grad_shardings`` lays the summed gradients out like the optimizer state.
    ``dropout_seed`` (when the model has dropout): each micro-batch draws from a key that is
    a function of the seed, the step and the micro-batch, so a resumed run replays it.
    """

    objective = objective or cross_entropy(graphdef, rest, loss_chunks)
    grad_fn = jax.grad(objective, has_aux=True)

    root = None if dropout_seed is None else jax.random.fold_in(jax.random.key(dropout_seed), 3)

    def constrain(tree: Any, shardings: Any) -> Any:
        return tree if shardings is None else jax.lax.with_sharding_constraint(tree, shardings)

    def step(state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
        params, frozen = state.params, state.frozen
        step_key = None if root is None else jax.random.fold_in(root, state.step)

        def accumulate(carry: Any, micro: tuple[Batch, jax.Array]) -> tuple[Any, None]:
            grads_sum, ce_sum, count = carry
            micro_batch, index = micro
            key = None if step_key is None else jax.random.fold_in(step_key, index)
            grads, (ce, n, model_metrics) = grad_fn(params, frozen, micro_batch, key)
            grads_sum = jax.tree.map(jnp.add, grads_sum, constrain(grads, grad_shardings))
            return (grads_sum, ce_sum + ce, count + n), model_metrics

        zero = jnp.zeros((), jnp.float32)
        init = (constrain(jax.tree.map(jnp.zeros_like, params), grad_shardings), zero, zero)
        if micro_steps == 1:
            key = None if step_key is None else jax.random.fold_in(step_key, 0)
            grads_sum, (ce_sum, count, model_metrics) = grad_fn(params, frozen, batch, key)
        else:
            micro = constrain(split_micro(batch, micro_steps), micro_sharding)
            indices = jnp.arange(micro_steps, dtype=jnp.int32)
            (grads_sum, ce_sum, count), per_micro = jax.lax.scan(accumulate, init, (micro, indices))
            model_metrics = jax.tree.map(lambda m: jnp.mean(m, axis=0), per_micro)
        grads_sum = constrain(grads_sum, grad_shardings)
        denominator = jnp.maximum(count, 1.0)
        grads = jax.tree.map(lambda g: g / denominator, grads_sum)
        loss = ce_sum / denominator
        updates, opt_state = optimizer.update(grads, state.opt_state, params)
        new_params = optax.apply_updates(params, updates)
        skipped = state.skipped
        if skip_nonfinite:
            finite = jnp.isfinite(loss) & jnp.isfinite(optax.global_norm(updates))
            keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
            new_params = jax.tree.map(keep, new_params, params)
            opt_state = jax.tree.map(keep, opt_state, state.opt_state)
            skipped = skipped + jnp.where(finite, 0, 1).astype(skipped.dtype)
        metrics = {
            "loss": loss,
            "grad_norm": optax.global_norm(grads),
            "learning_rate": schedule(state.step),
            "skipped": skipped,
            "model": model_metrics,
        }
        new_state = dataclasses.replace(
            state, params=new_params, opt_state=opt_state, step=state.step + 1, skipped=skipped
        )
        return new_state, metrics

    return step


def make_eval_step(
    graphdef: nnx.GraphDef, rest: Any, objective: Objective | None = None
) -> Callable[[Any, Any, Batch], tuple[jax.Array, jax.Array, dict]]:
    """``eval_step(params, frozen, batch) -> (summed loss, count, metrics)`` of the
    objective; ``metrics`` are the objective's own ``train/...`` metrics of the batch (a
    preference objective's reward accuracy and margin), keyed without the prefix."""
    objective = objective or cross_entropy(graphdef, rest)

    def eval_step(params: Any, frozen: Any, batch: Batch) -> tuple[jax.Array, jax.Array, dict]:
        _, (loss_sum, count, metrics) = objective(params, frozen, batch, None)
        own = {
            k.removeprefix(TRAIN_PREFIX): v
            for k, v in metrics.items()
            if k.startswith(TRAIN_PREFIX)
        }
        return loss_sum, count, own

    return eval_step
