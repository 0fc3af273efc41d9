"""Build a schedule and the optimizer it drives from their typed configs, via the registries."""

from __future__ import annotations

from typing import Any

import optax


def build_schedule(
    registries: Any, schedule_config: Any, peak_lr: float, total_steps: int
) -> optax.Schedule:
    """The schedule named by ``schedule.name``, peaking at ``peak_lr``."""
    return registries.schedules.get(schedule_config.name).load()(
        schedule_config, peak_lr, total_steps
    )


def build_optimizer(
    registries: Any, optimizer_config: Any, schedule: optax.Schedule
) -> optax.GradientTransformation:
    """The optimizer named by ``optimizer.name``, its learning rate given by ``schedule``."""
    return registries.optimizers.get(optimizer_config.name).load()(optimizer_config, schedule)
