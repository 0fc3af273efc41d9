"""A training job's mesh, decided from its whole config: the sharding group sizes the axes,
and the model says how many routed experts a ``sharding.expert=0`` (auto) axis may split."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from theseus.core.sharding.placement import Layout
from theseus.core.train.configs import TrainJobConfig


def model_experts(model: Any) -> int:
    """The routed experts of a model config (its ``n_experts``); 0 for a dense model."""
    return int(getattr(model, "n_experts", 0) or 0)


def job_layout(config: TrainJobConfig, devices: Sequence[Any] | None = None) -> Layout:
    """The job's :class:`Layout` over ``devices`` (every device of every process by default):
    a mixture's experts go over the ``expert`` axis unless ``sharding.expert`` says otherwise."""
    return Layout(config.sharding, devices, experts=model_experts(config.model))
