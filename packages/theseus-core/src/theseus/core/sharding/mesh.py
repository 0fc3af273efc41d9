"""The device mesh: axes (data, fsdp, tensor), sized from the config and the devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, Mesh
from theseus.core.sharding.config import MESH_AXES, ShardingConfig, mesh_shape


def make_mesh(config: ShardingConfig, devices: Sequence[Any] | None = None) -> Mesh:
    """A mesh over ``devices`` (all devices of all processes by default) with Auto axes.

    Auto (not Explicit) axes: the models carry no sharding annotations of their own; the
    compiler propagates the layouts of parameters and batch through them.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_shape(config, len(devices))
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    return jax.make_mesh(shape, MESH_AXES, (AxisType.Auto,) * len(MESH_AXES), devices=devices)


def describe(mesh: Mesh) -> str:
    return " x ".join(f"{name}={size}" for name, size in mesh.shape.items())
