"""Compile-only devices of a target: the real XLA:TPU and XLA:GPU compilers, no chip.

TPU: libtpu's topology for the slice shape (``get_topology_desc(topology_name=...)``).
NVIDIA: the CUDA 12 plugin's topology ``partitions x hosts x GPUs per host`` with the chip's
target description (``gpu_config``). Both need the ``aot`` extra; without it the error says
what to install. Arrays cannot be placed on these devices: a program is lowered against
abstract arrays and compiled, and its memory and cost analyses read.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from theseus.core.chips.environment import installed, quiet_libtpu
from theseus.core.chips.gpu_config import gpu_target_config
from theseus.core.chips.targets import Target, TargetError, parse_target
from theseus.core.errors import one_line

INSTALL = "uv sync --all-packages --inexact --group aot (pip: pip install 'theseus-core[aot]')"


def check_installed(target: Target) -> None:
    """A one-line TargetError naming what to install when the target's compiler is missing."""
    if target.platform == "tpu":
        missing = [] if installed("libtpu") else ["libtpu"]
    else:
        needed = {
            "jax_cuda12_plugin": "the CUDA 12 plugin",
            "nvidia.cudnn": "cuDNN",
            "nvidia.cuda_runtime": "the CUDA runtime",
        }
        missing = [what for module, what in needed.items() if not installed(module)]
    if missing:
        raise TargetError(
            f"--target {target.name} compiles with {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: {INSTALL}"
        )


def compile_only_devices(name: str) -> list[Any]:
    """The devices of target ``name`` (a list of ``jax.Device`` that only compile)."""
    target = parse_target(name)
    check_installed(target)
    return list(_devices(target))


@functools.cache
def _devices(target: Target) -> tuple[Any, ...]:
    quiet_libtpu()
    from jax.experimental import topologies

    try:
        if target.platform == "tpu":
            bounds = tuple(int(n) for n in target.host_bounds.split("x"))
            topology = topologies.get_topology_desc(
                topology_name=target.topology,
                platform="tpu",
                chips_per_host_bounds=bounds,
                wrap=target.wrap,
            )
        else:
            topology = topologies.get_topology_desc(
                platform="cuda",
                topology=target.topology,
                target_config=gpu_target_config(target.chip),
            )
    except Exception as error:  # the plugin refuses: say which target and why, in one line
        hint = "; start JAX on the CPU (JAX_PLATFORMS=cpu)" if target.platform == "gpu" else ""
        raise TargetError(
            f"--target {target.name}: the {target.platform.upper()} compiler could not make "
            f"its devices ({one_line(error)[:300]}){hint}"
        ) from error
    devices = tuple(topology.devices)
    if len(devices) != target.devices:
        raise TargetError(
            f"--target {target.name}: the compiler made {len(devices)} devices, expected "
            f"{target.devices}"
        )
    return devices


@contextlib.contextmanager
def without_disk_cache() -> Iterator[None]:
    """JAX's persistent compilation cache off for the duration: an executable compiled for
    compile-only devices is written there but cannot be read back ("PjRtCompiler must be
    constructed with a Client"), so a cached entry only costs disk and a warning."""
    import jax

    previous = jax.config.values["jax_enable_compilation_cache"]
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)


def is_compile_only(device: Any) -> bool:
    """A device of a target (another platform than the backend this process runs)."""
    import jax

    return device.platform != jax.default_backend()
