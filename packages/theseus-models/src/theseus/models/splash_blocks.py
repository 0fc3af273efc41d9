"""Block sizes of the Pallas TPU splash-attention kernel, per chip and shape (no JAX).

The kernel walks the queries in blocks of ``q`` rows and, for each, the keys in blocks of
``kv`` (loaded together), ``kv_compute`` at a time; the backward's ``dkv`` and ``dq`` passes
have blocks of their own, and ``fused_bwd`` computes dq inside the dkv pass (one backward
kernel, not two). Blocks of 128 (the kernel's default) spend most of a v5e's time on per-block
overhead; larger blocks amortise it, up to the point where a block's scores no longer fit
the core's vector memory.

``MEASURED`` holds what ``bench/tpu_attention_sweep.py`` found fastest (forward + backward)
on a chip, by head dim and up to a length, as the sweep wrote it in theseus-core's
``chips/measured.json``; ``splash_blocks`` picks the row for a length and clamps the blocks to
the (padded) sequence. A chip without measurements gets ``DEFAULT``. docs/targets.md shows
the table and the sweep's timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.chips.measured import section

MIN_BLOCK = 128  # the kernel's lane width: every block is a multiple of it


@dataclass(frozen=True)
class SplashBlocks:
    q: int = 512
    kv: int = 512
    kv_compute: int = 512
    q_dkv: int = 512
    kv_dkv: int = 512
    kv_dkv_compute: int = 512
    q_dq: int = 512
    kv_dq: int = 512
    fused_bwd: bool = False

    def clamped(self, length: int) -> SplashBlocks:
        """Blocks for a sequence of ``length``: none longer than the length padded to 128.

        A sequence no longer than the largest block is one block long (``cap``): a block
        that does not divide ``cap`` becomes ``cap``, so every block divides it, the compute
        blocks divide theirs, and the padding stays under 128 (552 tokens: blocks of 640,
        where 512 beside 640 would pad to their common multiple, 2560, and a compute block
        of 512 cannot walk a block of 640). Longer sequences keep the table's blocks.
        """
        cap = max(MIN_BLOCK, -(-length // MIN_BLOCK) * MIN_BLOCK)
        fit = {name: min(getattr(self, name), cap) for name in BLOCK_FIELDS}
        if cap <= max(getattr(self, name) for name in BLOCK_FIELDS):
            fit = {name: block if cap % block == 0 else cap for name, block in fit.items()}
        return SplashBlocks(**fit, fused_bwd=self.fused_bwd)

    @property
    def padded_to(self) -> int:
        """What the sequence is padded to a multiple of: every block divides it."""
        from math import lcm

        return lcm(*(getattr(self, name) for name in BLOCK_FIELDS))

    def describe(self) -> str:
        bwd = "fused" if self.fused_bwd else f"dq {self.q_dq}x{self.kv_dq}"
        return (
            f"blocks q {self.q} kv {self.kv}/{self.kv_compute}, "
            f"dkv {self.q_dkv}x{self.kv_dkv}/{self.kv_dkv_compute}, {bwd}"
        )


BLOCK_FIELDS = ("q", "kv", "kv_compute", "q_dkv", "kv_dkv", "kv_dkv_compute", "q_dq", "kv_dq")

DEFAULT = SplashBlocks()  # 512 everywhere: what MaxText configures on TPUs
LONGEST = 1 << 62  # a row's length bound when the file says null: any longer


def measured_rows(table: dict[str, Any]) -> dict[str, dict[int, list[tuple[int, SplashBlocks]]]]:
    """chip (jax device_kind) -> head_dim -> [(up to this length, blocks)], lengths
    ascending, from a ``splash_blocks`` section of ``measured.json``."""
    return {
        chip: {int(dim): [row_of(row) for row in rows] for dim, rows in dims.items()}
        for chip, dims in table["chips"].items()
    }


def row_of(row: dict[str, Any]) -> tuple[int, SplashBlocks]:
    longest = LONGEST if row["up_to"] is None else int(row["up_to"])
    return longest, SplashBlocks(**row["blocks"])


# What bench/tpu_attention_sweep.py measured fastest (theseus-core's chips/measured.json).
MEASURED = measured_rows(section("splash_blocks"))


def splash_blocks(device_kind: str, seq_len: int, head_dim: int) -> SplashBlocks:
    """The measured blocks for this chip, length and head dim (the nearest head dim
    measured; ``DEFAULT`` for a chip never measured), clamped to the sequence."""
    by_dim = MEASURED.get(device_kind)
    if not by_dim:
        return DEFAULT.clamped(seq_len)
    dim = min(by_dim, key=lambda d: (abs(d - head_dim), d))
    rows = by_dim[dim]
    for longest, blocks in rows:
        if seq_len <= longest:
            return blocks.clamped(seq_len)
    return rows[-1][1].clamped(seq_len)
