"""Measured speeds of the attention kernels XLA cannot see into (no JAX).

A Pallas kernel is opaque to the compiler's cost model and to the HLO roofline: its FLOPs
are not in the program. The step estimate prices each call of TPU splash attention from its
shapes instead: a forward call does 2 of the 7 causal ``B * H * T^2 * K`` matmul units of a
forward + backward (the backward 5: 4 in its dkv pass and 3 in its dq pass when they run
apart), at the rate measured for the chip, head dim and length with the blocks the model uses
(``bench/tpu_attention_sweep.py``, rates counted as ``7 * B * H * T^2 * K / seconds``, in
``measured.json``). A TPU never measured (v5p, v6e) takes the v5e's rate scaled by its peak over the v5e's: the
kernel is assumed to reach the same share of the chip's peak (labelled so in the estimate).
"""

from __future__ import annotations

from theseus.core.chips.measured import section
from theseus.core.chips.specs import chip_of_device_kind

_RATES = section("splash_rates")
# device kind -> head_dim -> [(seq_len, TFLOP/s)], lengths ascending, with the blocks the
# model runs (measured.json's splash_blocks); between two lengths the rate is interpolated in
# log(length), outside the nearest measured rate is taken
SPLASH_TFLOPS: dict[str, dict[int, list[tuple[int, float]]]] = {
    chip: {int(dim): [(int(t), float(r)) for t, r in rows] for dim, rows in dims.items()}
    for chip, dims in _RATES["chips"].items()
}
UNITS = {"fwd": 2, "dkv": 4, "dq": 3, "fused": 5}  # causal matmul units per kernel call
# The sweep times the kernels with the work around them (the loss's product and casts, the
# backward's preparation): the kernels alone run at the sweep's rate / KERNEL_SHARE (what a
# step's profile measured; measured.json says where).
KERNEL_SHARE = float(_RATES["kernel_share"])
MEASURED_ON = str(_RATES["measured_on"])  # the chip whose rates stand in for TPUs never measured


def peak_ratio(device_kind: str) -> float | None:
    """1 on a measured chip; a TPU's peak over the measured chip's; None otherwise."""
    if device_kind in SPLASH_TFLOPS:
        return 1.0
    chip, measured = chip_of_device_kind(device_kind), chip_of_device_kind(MEASURED_ON)
    if chip is None or measured is None or chip.platform != "tpu":
        return None
    return chip.peak_flops / measured.peak_flops


def rate_source(device_kind: str) -> str:
    """Where the splash rate of this chip comes from, for the estimate's label."""
    ratio = peak_ratio(device_kind)
    if ratio == 1.0:
        return "its rate measured on this chip"
    return f"the v5e's measured rate x {ratio:.2f} (this chip's peak over the v5e's)"


def splash_rate(device_kind: str, head_dim: int, seq_len: int) -> float | None:
    """FLOP/s of splash attention on this chip at this head dim (the nearest measured) and
    length; None on a chip that is no TPU theseus knows."""
    import math

    ratio = peak_ratio(device_kind)
    if ratio is None:
        return None
    by_dim = SPLASH_TFLOPS.get(device_kind) or SPLASH_TFLOPS[MEASURED_ON]
    rows = by_dim[min(by_dim, key=lambda d: (abs(d - head_dim), d))]
    scale = ratio * 1e12 / KERNEL_SHARE
    if seq_len <= rows[0][0]:
        return rows[0][1] * scale
    for (t0, r0), (t1, r1) in zip(rows, rows[1:], strict=False):
        if seq_len <= t1:
            w = math.log(seq_len / t0) / math.log(t1 / t0)
            return (r0 + w * (r1 - r0)) * scale
    return rows[-1][1] * scale
