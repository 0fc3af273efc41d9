"""When a step does not fit its chip: which single change would make it fit, compiled.

Three levers, each tried alone on the same mesh and compiled (memory analysis only):
activation checkpointing (``sharding.remat=full``: each block keeps only its input), half the
per-device batch (the global batch kept by twice the micro-steps), and sharding the
parameters and optimizer state (``sharding.strategy=fsdp``, tensor parallelism kept).
A lever that is already pulled is skipped. Each answer says the peak it compiles to.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from theseus.core.errors import TheseusError
from theseus.core.sharding.config import parse_strategy
from theseus.core.train.configs import TrainJobConfig

log = logging.getLogger(__name__)


def alternatives(config: TrainJobConfig, per_device: int) -> list[tuple[str, TrainJobConfig]]:
    """(the override, the config with it) for each lever not pulled yet."""
    sharding, training = config.sharding, config.training
    found: list[tuple[str, TrainJobConfig]] = []
    if sharding.remat != "full":
        changed = dataclasses.replace(sharding, remat="full")
        found.append(("sharding.remat=full", dataclasses.replace(config, sharding=changed)))
    if per_device > 1:
        half = per_device // 2
        changed = dataclasses.replace(training, per_device_batch_size=half)
        label = f"training.per_device_batch_size={half}"
        found.append((label, dataclasses.replace(config, training=changed)))
    base, tensor = parse_strategy(sharding.strategy)
    if base != "fsdp":
        strategy = "fsdp+tp" if tensor else "fsdp"
        changed = dataclasses.replace(sharding, strategy=strategy, data=0, fsdp=0)
        found.append(
            (f"sharding.strategy={strategy}", dataclasses.replace(config, sharding=changed))
        )
    return found


def advise(
    config: TrainJobConfig,
    per_device: int,
    build: Callable[[TrainJobConfig], Any],
    hbm_bytes: int,
) -> list[dict[str, Any]]:
    """Each lever's peak bytes per chip and whether it fits (``build`` makes a setup)."""
    from theseus.core.plan.plan_report import compile_step, memory

    advice: list[dict[str, Any]] = []
    for label, changed in alternatives(config, per_device):
        log.info("dry run: the step does not fit; compiling it with %s", label)
        try:
            compiled, _, needed = compile_step(build(changed))
        except TheseusError as error:  # e.g. a mesh the new strategy cannot divide
            advice.append({"change": label, "fits": False, "problem": str(error)})
            continue
        peak = memory(compiled, needed).get("peak_bytes")
        fits = peak is not None and 0 < peak <= hbm_bytes
        advice.append({"change": label, "peak_bytes": peak, "fits": fits})
    return advice
