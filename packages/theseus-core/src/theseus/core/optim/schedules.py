"""Built-in schedules: each ``build(config, peak_lr, total_steps) -> optax.Schedule``."""

from __future__ import annotations

from typing import Any

import optax
from theseus.core.optim.configs import warmup_steps


def _warmup(config: Any, total_steps: int) -> int:
    return warmup_steps(config, total_steps)


def constant(config: Any, peak_lr: float, total_steps: int) -> optax.Schedule:
    warmup = _warmup(config, total_steps)
    if warmup == 0:
        return optax.constant_schedule(peak_lr)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak_lr, warmup), optax.constant_schedule(peak_lr)], [warmup]
    )


linear_warmup = constant


def cosine(config: Any, peak_lr: float, total_steps: int) -> optax.Schedule:
    warmup = _warmup(config, total_steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=peak_lr,
        warmup_steps=warmup,
        decay_steps=max(total_steps, warmup + 1),
        end_value=peak_lr * config.final_fraction,
    )


def wsd(config: Any, peak_lr: float, total_steps: int) -> optax.Schedule:
    warmup = _warmup(config, total_steps)
    decay = max(1, int(round(total_steps * config.decay_fraction)))
    stable = max(0, total_steps - warmup - decay)
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak_lr, max(warmup, 1)),
            optax.constant_schedule(peak_lr),
            optax.linear_schedule(peak_lr, peak_lr * config.final_fraction, decay),
        ],
        [warmup, warmup + stable],
    )
