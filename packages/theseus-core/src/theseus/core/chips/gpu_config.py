"""The GPU target description XLA:GPU compiles against when there is no GPU (no JAX).

XLA reads a ``GpuTargetConfigProto`` in text form (``xla/stream_executor/
device_description.proto``): the device's limits, its compute capability and the cuDNN and
CUDA runtime versions to compile for. The numbers come from ``specs.GpuLimits`` (published
figures, sources there); the versions are those of the wheels the ``aot`` extra installs.
"""

from __future__ import annotations

from theseus.core.chips.specs import Chip

CUDNN_VERSION = (9, 8, 0)  # the oldest cuDNN the jax 0.10 CUDA 12 plugin accepts
CUDA_RUNTIME_VERSION = (12, 8, 0)
MAX_GRID = (2**31 - 1, 65535, 65535)  # blocks per grid in x, y, z (every CUDA GPU since 3.0)
WARP = 32
THREADS_PER_BLOCK = 1024
SHARED_MEMORY_PER_BLOCK = 48 * 1024  # without opting in


def gpu_target_config(chip: Chip) -> str:
    """The text proto of ``chip`` for ``get_topology_desc(platform="cuda", target_config=...)``."""
    limits = chip.gpu
    if limits is None:
        raise ValueError(f"{chip.name} is not a GPU")
    major, minor = limits.compute_capability
    device = {
        "threads_per_block_limit": THREADS_PER_BLOCK,
        "threads_per_warp": WARP,
        "shared_memory_per_block": SHARED_MEMORY_PER_BLOCK,
        "shared_memory_per_core": limits.shared_memory_per_sm,
        "threads_per_core_limit": limits.threads_per_sm,
        "core_count": limits.sm_count,
        "fpus_per_core": limits.fp32_cores_per_sm,
        "block_dim_limit_x": MAX_GRID[0],
        "block_dim_limit_y": MAX_GRID[1],
        "block_dim_limit_z": MAX_GRID[2],
        "memory_bandwidth": int(chip.hbm_bandwidth),
        "l2_cache_size": limits.l2_bytes,
        "clock_rate_ghz": limits.clock_ghz,
        "device_memory_size": chip.hbm_bytes,
        "shared_memory_per_block_optin": limits.shared_memory_per_block_optin,
        "registers_per_core_limit": limits.registers_per_sm,
        "registers_per_block_limit": limits.registers_per_sm,
    }
    lines = ["gpu_device_info {"]
    lines += [f"  {key}: {value}" for key, value in device.items()]
    lines += [f"  cuda_compute_capability {{ major: {major} minor: {minor} }}", "}"]
    lines.append('platform_name: "CUDA"')
    lines.append(_version("dnn_version_info", CUDNN_VERSION))
    lines.append(_version("runtime_version", CUDA_RUNTIME_VERSION))
    lines.append(f'device_description_str: "{limits.description}"')
    return "\n".join(lines) + "\n"


def _version(field: str, version: tuple[int, int, int]) -> str:
    major, minor, patch = version
    return f"{field} {{ major: {major} minor: {minor} patch: {patch} }}"
