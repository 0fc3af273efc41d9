"""The example optimizer and schedule, built with Optax."""

from __future__ import annotations

from typing import Any

import jax
import optax


def signum(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    """Signum: the sign of an exponential moving average of the gradient."""
    return optax.chain(
        optax.trace(decay=config.momentum),
        optax.stateless(lambda updates, params: jax.tree.map(jax.numpy.sign, updates)),
        optax.scale_by_learning_rate(learning_rate),
    )


def step_decay(config: Any, peak_lr: float, total_steps: int) -> optax.Schedule:
    return optax.exponential_decay(
        peak_lr, transition_steps=config.every, decay_rate=config.factor, staircase=True
    )
