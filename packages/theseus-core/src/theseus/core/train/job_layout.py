"""A training job's mesh, decided from its whole config: the sharding group sizes the axes,
and the model says how many routed experts a ``sharding.expert=0`` (auto) axis may split.

A dropless mixture on TPUs gets no automatic expert axis. A dropless exchange over an expert
axis of P devices must give each device room for every assignment its P devices could send
it (P times its own), and on TPUs its grouped matmuls and activations grow with that room:
Qwen3-30B-A3B on v5p-64, 2 x 4,096 tokens a chip, remat full, compiled here: expert 32
estimated 14.6 s a step at a 57.7 GiB peak, expert 8 4.44 s at 32.1 GiB, pure fsdp 1.59 s at
26.0 GiB (MaxText's default, the same work: 1.68 s at 27.1 GiB;
bench/results/scale_vs_maxtext.json). On GPUs the axis stays the default: on h100x8 the same
model at 2 rows a chip fits with expert 8 (60.7 GiB, an estimated 0.79 s), where fsdp 8 needs
82.8 GiB of 80 (81.5 at 1 row, an estimated MFU of 6%: every expert's weights gathered to every
GPU each layer). On CPUs (tests, simulated meshes) it stays as well. With a capacity
(``model.capacity_factor`` or ``sharding.expert_capacity`` above 0) every device's room is
bounded, and auto takes the largest expert axis the devices allow everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from theseus.core.sharding.placement import Layout
from theseus.core.train.configs import TrainJobConfig


def model_experts(model: Any) -> int:
    """The routed experts of a model config (its ``n_experts``); 0 for a dense model."""
    return int(getattr(model, "n_experts", 0) or 0)


def drops_tokens(config: TrainJobConfig) -> bool:
    """Whether a run's experts take at most a capacity of assignments: the model's own
    ``capacity_factor``, or ``sharding.expert_capacity`` for an exchange over experts."""
    model_capacity = float(getattr(config.model, "capacity_factor", 0.0) or 0.0)
    return model_capacity > 0 or config.sharding.expert_capacity > 0


def auto_axis_experts(config: TrainJobConfig, platform: str) -> int:
    """The experts an auto ``expert`` axis may split on ``platform``: the model's, but none
    (the axis stays 1) for a dense model or a dropless mixture on TPUs."""
    if platform == "tpu" and not drops_tokens(config):
        return 0
    return model_experts(config.model)


def job_layout(config: TrainJobConfig, devices: Sequence[Any] | None = None) -> Layout:
    """The job's :class:`Layout` over ``devices`` (every device of every process by default):
    a mixture's experts go over the ``expert`` axis as :func:`auto_axis_experts` says, unless
    ``sharding.expert`` says otherwise."""
    platform = (devices[0] if devices else jax.devices()[0]).platform
    return Layout(config.sharding, devices, experts=auto_axis_experts(config, platform))
