"""When a step does not fit its chip: a change that makes it fit, found in few compiles.

Three levers, each tried alone on the same mesh and compiled for its memory analysis, in
this order: sharding the parameters and optimizer state (``sharding.strategy=fsdp``, tensor
parallelism kept), activation checkpointing (``sharding.remat=full``: each block keeps only
its input), half the per-device batch (the global batch kept by twice the micro-steps). A
lever the step already pulls is skipped (``remat=auto`` that chose ``full`` included), and
fsdp on a mesh whose batch axes have one device (nothing to shard over).

The search stops at the first lever that fits: on XLA:TPU a program too large for the chip
is refused within seconds, but one that fits is compiled in full (minutes for a real model),
so the levers after it are reported as not compiled. When no single lever fits, all of
them together are compiled once, to say whether combining them would do. Each answer gives
the peak it compiled to and the seconds it took; the one that fits, its estimated step time
and MFU too (read from the program compiled to find it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from theseus.core.chips.specs import chip_of_device_kind
from theseus.core.errors import TheseusError
from theseus.core.sharding.config import parse_strategy
from theseus.core.train.configs import TrainJobConfig

Lever = tuple[str, Callable[[TrainJobConfig], TrainJobConfig]]
NOT_COMPILED = "not compiled: an earlier change fits"


def _fsdp(strategy: str) -> Callable[[TrainJobConfig], TrainJobConfig]:
    def change(config: TrainJobConfig) -> TrainJobConfig:
        sharding = dataclasses.replace(config.sharding, strategy=strategy, data=0, fsdp=0)
        return dataclasses.replace(config, sharding=sharding)

    return change


def _remat_full(config: TrainJobConfig) -> TrainJobConfig:
    return dataclasses.replace(config, sharding=dataclasses.replace(config.sharding, remat="full"))


def _per_device(rows: int) -> Callable[[TrainJobConfig], TrainJobConfig]:
    def change(config: TrainJobConfig) -> TrainJobConfig:
        training = dataclasses.replace(config.training, per_device_batch_size=rows)
        return dataclasses.replace(config, training=training)

    return change


def levers(config: TrainJobConfig, per_device: int, remat: str, shards: int) -> list[Lever]:
    """(the override, the change) for each lever not pulled yet, in the order tried;
    ``remat``: the level the step runs (what ``auto`` chose); ``shards``: the devices fsdp
    would shard the state over (the batch axes': none to gain on one)."""
    found: list[Lever] = []
    base, tensor = parse_strategy(config.sharding.strategy)
    if base != "fsdp" and shards > 1:
        strategy = "fsdp+tp" if tensor else "fsdp"
        found.append((f"sharding.strategy={strategy}", _fsdp(strategy)))
    if remat != "full":
        found.append(("sharding.remat=full", _remat_full))
    if per_device > 1:
        half = per_device // 2
        found.append((f"training.per_device_batch_size={half}", _per_device(half)))
    return found


def advise(
    config: TrainJobConfig,
    setup: Any,
    build: Callable[[TrainJobConfig], Any],
    hbm_bytes: int,
) -> list[dict[str, Any]]:
    """What each lever compiles to (``build`` makes a setup from a config): its peak bytes
    per chip, whether it fits and the seconds it took; the first that fits ends the search."""
    sizes = setup.layout.sizes
    # fsdp splits the state over the expert axis too (a data axis outside the expert layers)
    shards = sizes["data"] * sizes["fsdp"] * sizes.get("expert", 1)
    tried = levers(config, setup.per_device, setup.remat.level, shards)
    attempt = Attempt(build, hbm_bytes)
    advice: list[dict[str, Any]] = []
    for number, (label, change) in enumerate(tried, 1):
        if any(a["fits"] for a in advice):
            advice.append({"change": label, "fits": None, "problem": NOT_COMPILED})
            continue
        what = f"the step with {label} (change {number} of {len(tried)})"
        advice.append(attempt(label, change(config), what))
    if len(tried) > 1 and not any(a["fits"] for a in advice):
        together = config
        for _, change in tried:
            together = change(together)
        label = " ".join(label for label, _ in tried)
        what = f"the step with all {len(tried)} changes together"
        advice.append(attempt(label, together, what))
    return advice


@dataclass(frozen=True)
class Attempt:
    """A lever tried: its config's setup made by ``build`` and its step compiled for a chip
    of ``hbm_bytes``."""

    build: Callable[[TrainJobConfig], Any]
    hbm_bytes: int

    def __call__(self, label: str, changed: TrainJobConfig, what: str) -> dict[str, Any]:
        """One lever built and compiled: its peak, whether it fits, its seconds; the one
        that fits was compiled in full, so its step time is estimated too (no second dry
        run needed to see what the change costs)."""
        from theseus.core.plan.plan_report import compiled_fields
        from theseus.core.plan.step_compile import compile_step, memory

        started = time.perf_counter()
        try:
            setup = self.build(changed)
            step = compile_step(setup, what)
        except TheseusError as error:  # e.g. a mesh the new strategy cannot divide
            seconds = time.perf_counter() - started
            return {"change": label, "fits": False, "problem": str(error), "seconds": seconds}
        peak = memory(step.compiled, step.needed).get("peak_bytes")
        fits = peak is not None and 0 < peak <= self.hbm_bytes
        entry: dict[str, Any] = {"change": label, "peak_bytes": peak, "fits": fits}
        if fits and step.compiled is not None:
            chip = chip_of_device_kind(setup.layout.device_kind)
            found = compiled_fields(step.compiled, setup, chip)
            entry.update(
                {k: found[k] for k in ("step_seconds_estimate", "predicted_mfu") if k in found}
            )
        entry["seconds"] = time.perf_counter() - started
        return entry
