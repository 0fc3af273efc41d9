"""``--target`` names as users say them -> a chip, a device count and a topology (no JAX).

* Cloud TPU accelerator types: ``v5p-N`` counts TensorCores (two per chip: ``v5p-8`` is 4
  chips, one host), ``v5litepod-N`` (or ``v5e-N``) and ``v6e-N`` count chips. Each maps to
  the slice shape Cloud TPU provisions for it (cloud.google.com/tpu/docs/v5p, /v5e, /v6e).
* A slice's links: v5p slices of 64 chips and more (4x4x4, full cubes) are tori, their
  wraparound links close every dimension; smaller ones are open meshes. v5e and v6e pods
  close a dimension only where it spans the whole pod (16 chips: 8x16 wraps its second,
  16x16 both). The compiler must know: without the wraparound XLA:TPU cannot run a gather
  over a whole v5p-256 as a ring and lowers it as an all-reduce of a zero-padded buffer.
* NVIDIA machines: ``<chip>x<N>`` with chip ``h100``, ``h200`` or ``b200``: ``h100x8`` is one
  host of 8 GPUs, ``h100x16`` two hosts (8 GPUs per host beyond 8).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from theseus.core.chips.specs import CHIPS, Chip
from theseus.core.errors import ConfigError

# chips -> slice shape, as Cloud TPU provisions them
V5P_SHAPES = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    256: "4x8x8",
    512: "8x8x8",
    1024: "8x8x16",
    2048: "8x16x16",
    4096: "16x16x16",
    6144: "16x16x24",
}
LITE_SHAPES = {
    1: "1x1",
    4: "2x2",
    8: "2x4",
    16: "4x4",
    32: "4x8",
    64: "8x8",
    128: "8x16",
    256: "16x16",
}
# chips per host: v5p hosts hold 4 chips (2x2x1); v5e and v6e hold 1, 4 or 8 in a one-host
# slice (v5litepod-1/-4/-8, v6e-1/-4/-8) and 4 in every larger slice
V5P_HOST = "2x2x1"
LITE_HOSTS = {1: "1x1x1", 4: "2x2x1", 8: "2x4x1"}
LITE_MULTI_HOST = "2x2x1"
V5P_TORUS_SIDE = 4  # a v5p slice wraps when every side is a multiple of 4 (a full cube)
LITE_POD_SIDE = 16  # a v5e or v6e side wraps when it spans the pod
GPUS_PER_HOST = 8
EXAMPLES = "v5p-8, v5p-64, v5litepod-16, v6e-8, h100x8, h200x8, b200x8, h100x16"


class TargetError(ConfigError):
    """A ``--target`` that names no chip or shape theseus knows, or that cannot compile here."""


@dataclass(frozen=True)
class Target:
    name: str  # as given: v5p-8, h100x8
    chip: Chip
    devices: int  # JAX devices: chips (TPU) or GPUs
    topology: str  # TPU: libtpu's "v5p:2x2x1"; GPU: "partitions x hosts x devices per host"
    host_bounds: str = ""  # TPU: chips per host, "2x2x1" (libtpu's chips_per_host_bounds)
    wrap: tuple[bool, bool, bool] = (False, False, False)  # TPU: wraparound per dimension

    @property
    def platform(self) -> str:
        return self.chip.platform

    @property
    def hosts(self) -> int:
        """Machines of the slice: TPU chips / chips per host; GPUs: the topology's hosts."""
        if self.platform == "gpu":
            return int(self.topology.split("x")[1])
        per_host = 1
        for side in self.host_bounds.split("x"):
            per_host *= int(side)
        return self.devices // per_host


def tpu_target_names() -> list[str]:
    """Every TPU name ``parse_target`` accepts, smallest slice first in each family."""
    names = [f"v5p-{2 * chips}" for chips in V5P_SHAPES]
    for family in ("v5litepod", "v5e", "v6e"):
        names += [f"{family}-{chips}" for chips in LITE_SHAPES]
    return names


def parse_target(name: str) -> Target:
    """The target ``name`` stands for; a one-line TargetError naming the known forms."""
    text = name.strip().lower()
    tpu = re.fullmatch(r"(v5p|v5litepod|v5e|v6e)-(\d+)", text)
    if tpu:
        return _tpu(name, tpu.group(1), int(tpu.group(2)))
    gpu = re.fullmatch(r"([a-z]\d+)x(\d+)", text)
    if gpu:
        return _gpu(name, gpu.group(1), int(gpu.group(2)))
    raise TargetError(f"--target {name}: not a target theseus knows; use one of {EXAMPLES}")


def _tpu(name: str, family: str, count: int) -> Target:
    if family == "v5p":
        if count % 2:
            raise TargetError(f"--target {name}: v5p-N counts TensorCores, two per chip: N is even")
        chips, shapes, chip = count // 2, V5P_SHAPES, CHIPS["v5p"]
        bounds = V5P_HOST
    else:
        chips, shapes = count, LITE_SHAPES
        chip = CHIPS["v6e" if family == "v6e" else "v5e"]
        bounds = LITE_HOSTS.get(chips, LITE_MULTI_HOST)
    if chips not in shapes:
        sizes = ", ".join(f"{family}-{n * 2 if family == 'v5p' else n}" for n in shapes)
        raise TargetError(f"--target {name}: no such slice; {family} slices are {sizes}")
    shape = shapes[chips]
    return Target(name, chip, chips, f"{chip.name}:{shape}", bounds, _wraparound(family, shape))


def _wraparound(family: str, shape: str) -> tuple[bool, bool, bool]:
    """Which dimensions of a TPU slice ``shape`` ("4x4x8") close into rings."""
    sides = [int(side) for side in shape.split("x")]
    if family == "v5p":
        torus = all(side % V5P_TORUS_SIDE == 0 for side in sides)
        wraps = [torus] * len(sides)
    else:
        wraps = [side == LITE_POD_SIDE for side in sides]
    wraps += [False] * (3 - len(wraps))
    return (wraps[0], wraps[1], wraps[2])


def _gpu(name: str, chip_name: str, count: int) -> Target:
    chip = CHIPS.get(chip_name)
    if chip is None or chip.platform != "gpu":
        gpus = ", ".join(f"{c}x8" for c, spec in CHIPS.items() if spec.platform == "gpu")
        raise TargetError(f"--target {name}: unknown GPU {chip_name!r}; use one of {gpus}")
    if count < 1 or (count > GPUS_PER_HOST and count % GPUS_PER_HOST):
        raise TargetError(
            f"--target {name}: {count} GPUs; use up to {GPUS_PER_HOST} (one host) or a "
            f"multiple of {GPUS_PER_HOST} (hosts of {GPUS_PER_HOST})"
        )
    hosts = max(1, count // GPUS_PER_HOST)
    return Target(name, chip, count, f"1x{hosts}x{count // hosts}")
