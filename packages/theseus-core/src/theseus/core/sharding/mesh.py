"""The device mesh: axes (data, fsdp, expert, context, tensor), sized from the config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, Mesh
from theseus.core.sharding.config import MESH_AXES, SHOWN_WHEN_ONE, ShardingConfig, mesh_shape


def make_mesh(
    config: ShardingConfig, devices: Sequence[Any] | None = None, experts: int = 0
) -> Mesh:
    """A mesh over ``devices`` (all devices of all processes by default) with Auto axes, for
    a model of ``experts`` routed experts (0: dense; ``sharding.expert=0`` reads it).

    Auto (not Explicit) axes: the models carry no sharding annotations of their own; the
    compiler propagates the layouts of parameters and batch through them.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_shape(config, len(devices), experts)
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    return jax.make_mesh(shape, MESH_AXES, (AxisType.Auto,) * len(MESH_AXES), devices=devices)


def describe(mesh: Mesh) -> str:
    """``data=2 x fsdp=4 x tensor=1``; ``expert`` and ``context`` only when they split."""
    shown = [(n, s) for n, s in mesh.shape.items() if n in SHOWN_WHEN_ONE or s > 1]
    return " x ".join(f"{name}={size}" for name, size in shown)
