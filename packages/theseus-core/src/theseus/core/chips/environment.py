"""A plain CPU start on machines that hold the ahead-of-time compilers but no accelerator.

The ``aot`` extra installs libtpu and the CUDA 12 plugin next to the CPU jax so that any
machine can compile for TPUs and NVIDIA GPUs. Left alone, JAX then tries both at start-up on
a machine without them: the CUDA plugin fails its version checks (it has no cuFFT, cuSPARSE,
... by design) and logs a traceback, libtpu prints warnings about TPU host variables, and
JAX carries on with the CPU. ``default_to_cpu`` makes that start quiet by choosing the CPU
up front, only where it would be chosen anyway: ``JAX_PLATFORMS`` unset, an ahead-of-time
compiler installed, and neither an NVIDIA driver nor TPU device files on the machine.
Compile-only devices (``--target``) do not need a started TPU or GPU backend.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import MutableMapping

NVIDIA_DRIVER = "/proc/driver/nvidia/version"
TPU_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/[0-9]*")  # v4/v5e/v6e, v5p/v6e VMs
# What libtpu reads when it starts; set on a machine without TPUs, where its metadata-server
# lookups can only fail (and print warnings): one local host, no metadata server. Its lock
# file (one process per machine owns the chips) guards nothing there: without chips, any
# number of processes may compile at once (a test suite and its subprocesses, two users).
TPU_HOST_DEFAULTS = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_HOST_BOUNDS": "1,1,1",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def aot_compilers_installed() -> bool:
    return installed("libtpu") or installed("jax_cuda12_plugin")


def accelerator_present() -> bool:
    """An NVIDIA driver or TPU device files on this machine."""
    if os.path.exists(NVIDIA_DRIVER):
        return True
    return any(glob.glob(pattern) for pattern in TPU_DEVICE_FILES)


def default_to_cpu(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``JAX_PLATFORMS=cpu`` (and libtpu's host defaults) where the CPU is the only
    backend that can start; True when it did. Call before JAX is imported."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_PLATFORMS") or environ.get("JAX_PLATFORM_NAME"):
        return False
    if not aot_compilers_installed() or accelerator_present():
        return False
    environ["JAX_PLATFORMS"] = "cpu"
    quiet_libtpu(environ)
    return True


def quiet_libtpu(environ: MutableMapping[str, str] | None = None) -> None:
    """libtpu's host defaults for a machine without TPUs (values already set are kept)."""
    environ = os.environ if environ is None else environ
    if accelerator_present():
        return
    for key, value in TPU_HOST_DEFAULTS.items():
        environ.setdefault(key, value)
