"""Build a schedule and the optimizer it drives from their typed configs, via the registries.

Every optimizer, built-in or from a plugin, goes through :func:`build_optimizer`, which
wraps what the registered ``build`` returns so that the keys of
:class:`~theseus.core.optim.configs.OptimizerBase` work everywhere: ``grad_clip``
(:func:`with_clipping`) and ``weight_decay`` (:func:`with_weight_decay`, unless the config
class says ``applies_weight_decay = True``). The contracts of the ``build`` functions are
documented on ``OptimizerBase`` and ``ScheduleBase`` in ``theseus.core.optim.configs``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import optax
from theseus.core.optim.balance import with_balance_biases
from theseus.core.optim.configs import warmup_steps
from theseus.core.optim.optimizers import decay_mask, placeable_state

if TYPE_CHECKING:
    from theseus.core.registry import Registries


def build_schedule(
    registries: Registries, schedule_config: Any, peak_lr: float, total_steps: int
) -> optax.Schedule:
    """The schedule named by ``schedule.name``, peaking at ``peak_lr``, over
    ``schedule.total_steps`` steps when that is set, else over the run's ``total_steps``;
    a derived warm-up (``schedule.warmup_steps=-1``) becomes its count over that span."""
    span = getattr(schedule_config, "total_steps", 0) or total_steps
    if getattr(schedule_config, "warmup_steps", 0) < 0:
        schedule_config = dataclasses.replace(
            schedule_config, warmup_steps=warmup_steps(schedule_config, span)
        )
    return registries.schedules.get(schedule_config.name).load()(schedule_config, peak_lr, span)


def build_optimizer(
    registries: Registries, optimizer_config: Any, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """The optimizer named by ``optimizer.name``, its learning rate given by ``schedule``.

    ``clip -> the registered build -> decoupled weight decay``, the last only when the
    config class does not apply ``weight_decay`` itself, for every parameter but the
    balancing biases (``theseus.core.optim.balance``: a rule moves them); then a state the
    layout can place.
    """
    build = registries.optimizers.get(optimizer_config.name).load()
    transform = build(optimizer_config, schedule)
    if not getattr(optimizer_config, "applies_weight_decay", False):
        transform = with_weight_decay(optimizer_config, transform, schedule)
    return placeable_state(with_balance_biases(with_clipping(optimizer_config, transform)))


def with_clipping(
    config: Any, transform: optax.GradientTransformation
) -> optax.GradientTransformation:
    """``transform`` fed gradients clipped to global norm ``config.grad_clip`` (0: as is)."""
    if config.grad_clip and config.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(config.grad_clip), transform)
    return transform


def with_weight_decay(
    config: Any, transform: optax.GradientTransformation, learning_rate: optax.Schedule
) -> optax.GradientTransformation:
    """``transform``'s update plus ``-learning_rate(step) * config.weight_decay * p`` on the
    parameters :func:`~theseus.core.optim.optimizers.decay_mask` selects (0: as is)."""
    if not config.weight_decay:
        return transform
    return optax.chain(transform, decoupled_weight_decay(config.weight_decay, learning_rate))


def decoupled_weight_decay(
    rate: float, learning_rate: optax.Schedule
) -> optax.GradientTransformation:
    """Add ``-learning_rate(step) * rate * p`` to the update of every matrix ``p``.

    AdamW's convention, whatever came before it in the chain: a step shrinks a matrix by
    ``lr * rate`` of itself; norm gains, biases and other vectors are left alone.
    """

    def init(params: Any) -> optax.ScaleByScheduleState:
        del params
        return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise ValueError("weight decay needs the params: call update(updates, state, params)")
        step_rate = learning_rate(state.count) * rate

        def decay(update: Any, param: Any, is_matrix: bool) -> Any:
            return update - step_rate * param if is_matrix else update

        updates = jax.tree.map(decay, updates, params, decay_mask(params))
        return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))

    return optax.GradientTransformation(init, update)
