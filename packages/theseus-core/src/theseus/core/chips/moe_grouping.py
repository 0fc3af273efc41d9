"""How a dropless mixture multiplies its rows with their experts, chosen by measurement (no JAX).

Three groupings (``layers/expert_rows.py``): ``tiles``, each expert's rows padded to whole tiles
and one batched matmul over the tiles with a copy of an expert's weights per tile (the routed
FLOPs on every backend); ``ragged_dot`` (``jax.lax.ragged_dot``: on TPU a Mosaic
grouped-matmul kernel for the forward pass and the input gradient, the weight gradient written
as a matmul masked per expert; elsewhere a matmul with every expert, E / k times the routed
FLOPs); and ``grouped`` (``ragged_dot``'s forward with theseus's weight-gradient kernel, the
routed work in all three products; TPU only); and ``pallas`` (theseus's Pallas kernels for all
three products, TPU only). ``model.moe_grouping=auto`` takes, on a chip
with a row in ``measured.json``'s ``moe_grouping`` table, the fastest grouping of the row
nearest the model's shape among the rows that speak for it; a TPU never measured takes the
measured TPU's rows; CPUs and GPUs, measured on none, keep ``tiles``, and so does a shape no
row speaks for. A grouping asked for by name is kept.

Which rows speak for a shape: those whose expert count is within a factor ``REACH`` of its
own, since which grouping wins moves with E: ``tiles`` pads each of E groups and copies a
weight per tile, ``ragged_dot``'s weight gradient is written as E times the routed work. A row
won by ``grouped`` speaks for every larger expert count too: its work stays the routed work
at any E while the others' extra costs grow with it. Qwen3-30B-A3B (128 experts of 768,
top-8) on v5p-64 under fsdp 32, compiled: estimated steps of 1.62 s with ``grouped``, 6.1 s
with ``tiles`` and 9.8 s with ``ragged_dot`` (MaxText's megablox step: 1.68 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from theseus.core.chips.measured import section
from theseus.core.chips.specs import chip_of_device_kind

GROUPINGS = (
    "tiles",
    "ragged_dot",
    "grouped",
    "pallas",
)  # how the dropless layout multiplies with its experts
CHOICES = ("auto", *GROUPINGS)
DEFAULT = "tiles"  # off the chips measured
SHAPE_KEYS = ("d_model", "moe_d_ff", "n_experts", "k")  # what ``nearest`` compares
REACH = 2.0  # a row speaks for expert counts within this factor of its own
# groupings whose work is the routed work at any expert count: a row they win speaks for
# every larger count as well
ROUTED_AT_ANY_COUNT = ("grouped", "pallas")


@dataclass(frozen=True)
class ExpertShape:
    """What the choice reads of a mixture: its width, each expert's, how many, top-k."""

    d_model: int
    moe_d_ff: int
    n_experts: int
    k: int

    @classmethod
    def of(cls, config: Any) -> ExpertShape | None:
        """The shape of a model config with routed experts (``ExpertFields``); None else."""
        experts = getattr(config, "n_experts", 0)
        if not experts:
            return None
        return cls(config.d_model, config.moe_d_ff, experts, config.n_experts_per_token)


@dataclass(frozen=True)
class Measured:
    """One row of the table: a shape and each grouping's training tokens/s on a chip."""

    shape: dict[str, int]
    tokens_per_s: dict[str, float]
    commit: str

    def fastest(self) -> str:
        return max(self.tokens_per_s, key=lambda grouping: self.tokens_per_s[grouping])

    def label(self) -> str:
        s = self.shape
        speeds = ", ".join(
            f"{g} {self.tokens_per_s[g]:,.0f}"
            for g in sorted(self.tokens_per_s, key=lambda g: -self.tokens_per_s[g])
        )
        return (
            f"d_model {s['d_model']}, {s['n_experts']} experts of {s['moe_d_ff']}, top-{s['k']}, "
            f"T={s['seq_len']} x {s['rows']} rows: {speeds} tokens/s"
        )


def _table() -> dict[str, list[Measured]]:
    chips = section("moe_grouping")["chips"]
    return {
        chip: [
            Measured(
                dict(r["shape"]), {g: float(v) for g, v in r["tokens_per_s"].items()}, r["commit"]
            )
            for r in rows
        ]
        for chip, rows in chips.items()
    }


MEASURED: dict[str, list[Measured]] = _table()


def nearest(rows: list[Measured], shape: ExpertShape) -> Measured:
    """The row whose shape is nearest ``shape``: the least sum of |log ratio| over
    ``SHAPE_KEYS`` (twice the experts' width is as far as half of it)."""
    wanted = {key: getattr(shape, key) for key in SHAPE_KEYS}
    return min(
        rows,
        key=lambda row: sum(abs(math.log(row.shape[k] / wanted[k])) for k in SHAPE_KEYS),
    )


def speaks_for(row: Measured, shape: ExpertShape) -> bool:
    """Whether ``row`` decides for ``shape``: an expert count within a factor ``REACH`` of its
    own, or any larger one when ``row`` was won by a grouping in ``ROUTED_AT_ANY_COUNT``."""
    ratio = shape.n_experts / row.shape["n_experts"]
    if abs(math.log(ratio)) <= math.log(REACH):
        return True
    return ratio > 1 and row.fastest() in ROUTED_AT_ANY_COUNT


def within_reach(rows: list[Measured], shape: ExpertShape) -> list[Measured]:
    """The rows that speak for ``shape`` (``speaks_for``)."""
    return [row for row in rows if speaks_for(row, shape)]


def measured_rows(platform: str, device_kind: str) -> tuple[list[Measured], str]:
    """The rows that stand for this chip and where they come from: its own, a measured TPU's
    for a TPU never measured, none elsewhere."""
    if device_kind in MEASURED:
        return MEASURED[device_kind], f"measured on {device_kind}"
    chip = chip_of_device_kind(device_kind)
    on_tpu = platform == "tpu" or (chip is not None and chip.platform == "tpu")
    tpus = [kind for kind in MEASURED if kind.startswith("TPU")]
    if on_tpu and tpus:
        return MEASURED[tpus[0]], f"measured on {tpus[0]}, taken for {device_kind or 'this TPU'}"
    return [], ""


def choose_grouping(
    asked: str, platform: str, device_kind: str, shape: ExpertShape | None
) -> tuple[str, str]:
    """The grouping a mixture runs and the rule that chose it (``asked``:
    ``model.moe_grouping``)."""
    if asked != "auto":
        return asked, f"model.moe_grouping={asked}"
    rows, source = measured_rows(platform, device_kind)
    if shape is None or not rows:
        where = platform or "this backend"
        return DEFAULT, f"auto on {where}: no grouping measured there"
    near = within_reach(rows, shape)
    if not near:
        counts = sorted({r.shape["n_experts"] for r in rows})
        return DEFAULT, (
            f"auto: {DEFAULT}, no grouping {source} near {shape.n_experts} experts "
            f"(measured at {', '.join(map(str, counts))})"
        )
    row = nearest(near, shape)
    return row.fastest(), f"auto: the fastest {source} at {row.label()}"
