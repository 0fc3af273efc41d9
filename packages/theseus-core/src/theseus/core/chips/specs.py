"""Published numbers of the chips ``--target`` compiles for (no JAX).

Peak FLOP/s are dense bf16 (no sparsity); bandwidths in bytes per second; ``interconnect`` is
the chip-to-chip bandwidth one chip has in one direction (half the bidirectional figure
vendors publish), which the step estimates divide collective bytes by.

Sources (read December 2026):

* TPU v5p: cloud.google.com/tpu/docs/v5p -- 459 TFLOP/s bf16, 95 GiB HBM2e at 2,765 GB/s,
  1,200 GB/s bidirectional ICI per chip, 4 chips per host, 2 TensorCores per chip (one JAX
  device: megacore).
* TPU v5e (``v5litepod``): cloud.google.com/tpu/docs/v5e -- 197 TFLOP/s, 16 GB HBM2 at
  819 GB/s, 400 GB/s bidirectional ICI.
* TPU v6e (Trillium): cloud.google.com/tpu/docs/v6e -- 918 TFLOP/s, 32 GB HBM at 1,638 GB/s,
  800 GB/s bidirectional ICI.
* H100 SXM5: NVIDIA H100 datasheet and the Hopper architecture whitepaper -- 989 TFLOP/s bf16
  dense, 80 GB HBM3 at 3.35 TB/s, NVLink 4 at 900 GB/s bidirectional; 132 SMs, compute
  capability 9.0, 1.98 GHz boost, 50 MB L2, 228 KB shared memory per SM (227 KB per block
  opt-in), 64K 32-bit registers per SM, 2048 threads per SM (CUDA programming guide, table
  of compute capabilities).
* H200 SXM: NVIDIA H200 datasheet -- the H100's GH100 die with 141 GB HBM3e at 4.8 TB/s.
* B200: NVIDIA HGX B200 datasheet -- 2.25 PFLOP/s bf16 dense per GPU (4.5 sparse), 180 GB
  HBM3e per GPU in an 8-GPU board (1,440 GB), 8 TB/s, NVLink 5 at 1.8 TB/s bidirectional;
  compute capability 10.0 with 148 SMs and 228 KB shared memory per SM (CUDA programming
  guide); its L2 (126 MB) and clock (1.965 GHz) from NVIDIA's Blackwell technical brief.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 10**9
GiB = 1024**3


@dataclass(frozen=True)
class GpuLimits:
    """What XLA:GPU needs to know of an NVIDIA chip to compile for it without one."""

    compute_capability: tuple[int, int]
    sm_count: int
    clock_ghz: float
    l2_bytes: int
    shared_memory_per_sm: int
    shared_memory_per_block_optin: int
    fp32_cores_per_sm: int = 128
    registers_per_sm: int = 65536
    threads_per_sm: int = 2048
    description: str = ""  # the device name the driver reports: JAX's device_kind


@dataclass(frozen=True)
class Chip:
    name: str  # how targets name it: v5p, v5e, v6e, h100, h200, b200
    platform: str  # JAX's platform: tpu or gpu
    device_kind: str  # what jax.Device.device_kind reports for it
    hbm_bytes: int  # memory per chip (one JAX device)
    peak_flops: float  # dense bf16 FLOP/s per chip
    hbm_bandwidth: float  # bytes/s
    interconnect: float  # bytes/s one way per chip (ICI, NVLink)
    gpu: GpuLimits | None = None
    float32_matmul_flops: float = 0.0  # dense TF32 FLOP/s of float32 matmuls (0: as bf16)


# A v5e's 16 GiB of HBM as the chip itself reports what a program may use (memory_stats()
# "bytes_limit" on a lent v5e, December 2026; XLA:TPU refuses programs over the same 15.75 GiB)
V5E_USABLE = 16_911_433_728

CHIPS: dict[str, Chip] = {
    "v5p": Chip("v5p", "tpu", "TPU v5", 95 * GiB, 459e12, 2765 * GB, 600 * GB),
    "v5e": Chip("v5e", "tpu", "TPU v5 lite", V5E_USABLE, 197e12, 819 * GB, 200 * GB),
    "v6e": Chip("v6e", "tpu", "TPU v6 lite", 32 * GB, 918e12, 1638 * GB, 400 * GB),
    "h100": Chip(
        "h100",
        "gpu",
        "NVIDIA H100 80GB HBM3",
        80 * GB,
        989e12,
        3350 * GB,
        450 * GB,
        GpuLimits(
            (9, 0),
            132,
            1.98,
            50 * 1024**2,
            228 * 1024,
            227 * 1024,
            description="NVIDIA H100 80GB HBM3",
        ),
        float32_matmul_flops=494e12,
    ),
    "h200": Chip(
        "h200",
        "gpu",
        "NVIDIA H200",
        141 * GB,
        989e12,
        4800 * GB,
        450 * GB,
        GpuLimits(
            (9, 0), 132, 1.98, 50 * 1024**2, 228 * 1024, 227 * 1024, description="NVIDIA H200"
        ),
        float32_matmul_flops=494e12,
    ),
    "b200": Chip(
        "b200",
        "gpu",
        "NVIDIA B200",
        180 * GB,
        2250e12,
        8000 * GB,
        900 * GB,
        GpuLimits(
            (10, 0), 148, 1.965, 126 * 1024**2, 228 * 1024, 227 * 1024, description="NVIDIA B200"
        ),
        float32_matmul_flops=1100e12,
    ),
}


def chip_of_device_kind(device_kind: str) -> Chip | None:
    """The chip a JAX device kind names (``TPU v5``, ``NVIDIA H100 80GB HBM3``), if known."""
    for chip in CHIPS.values():
        if chip.device_kind == device_kind:
            return chip
    return None
