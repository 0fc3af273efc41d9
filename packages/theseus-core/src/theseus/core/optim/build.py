"""Build an optimizer and its schedule from config nodes, through the registries."""

from __future__ import annotations

from typing import Any

import optax


def build_schedule(
    registries: Any, schedule_config: Any, peak_lr: float, total_steps: int
) -> optax.Schedule:
    component = registries.schedules.get(schedule_config.name)
    return component.load()(schedule_config, peak_lr, total_steps)


def build_optimizer(
    registries: Any, optimizer_config: Any, schedule_config: Any, total_steps: int
) -> optax.GradientTransformation:
    """The optimizer named by ``optimizer.name``, driven by the schedule ``schedule.name``."""
    schedule = build_schedule(
        registries, schedule_config, optimizer_config.learning_rate, total_steps
    )
    component = registries.optimizers.get(optimizer_config.name)
    return component.load()(optimizer_config, schedule)
