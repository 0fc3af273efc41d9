"""How a dropless mixture multiplies its rows with their experts, chosen by measurement (no JAX).

Two groupings (``layers/expert_rows.py``): ``tiles``, each expert's rows padded to whole tiles
and one batched matmul over the tiles (the routed FLOPs on every backend), and ``ragged_dot``
(``jax.lax.ragged_dot``: on TPU a Mosaic grouped-matmul kernel for the forward pass and the
input gradient, the weight gradient a matmul masked per expert; elsewhere a matmul with every
expert, E / k times the routed FLOPs). ``model.moe_grouping=auto`` takes, on a chip with a
row in ``measured.json``'s ``moe_grouping`` table, the faster grouping of the row nearest the
model's shape among those within reach; a TPU never measured takes the measured TPU's rows;
CPUs and GPUs, measured on none, keep ``tiles``, and so does a shape no row reaches. A
grouping asked for by name is kept.

Reach: a row speaks for shapes whose expert count is within a factor ``REACH`` of its own.
On TPU ``ragged_dot``'s weight gradient multiplies every row with every expert (E times the
routed work), while ``tiles`` stays at the routed work: which grouping wins moves with E.
Qwen3-30B-A3B (128 experts of 768, top-8) on v5p-64 under fsdp 32, compiled: ragged_dot's
three weight gradients, 57 ms each per layer at the roofline, make an estimated step of
9.8 s, against 6.1 s with tiles (MaxText's megablox step: 1.68 s); the v5e row (8 experts)
cannot speak for it.
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
)  # how the dropless layout multiplies with its experts
CHOICES = ("auto", *GROUPINGS)
DEFAULT = "tiles"  # off the chips measured
SHAPE_KEYS = ("d_model", "moe_d_ff", "n_experts", "k")  # what ``nearest`` compares
REACH = 2.0  # a row speaks for expert counts within this factor of its own


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


def within_reach(rows: list[Measured], shape: ExpertShape) -> list[Measured]:
    """The rows whose expert count is within a factor ``REACH`` of the shape's."""
    experts = shape.n_experts
    return [r for r in rows if abs(math.log(r.shape["n_experts"] / experts)) <= math.log(REACH)]


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
    return row.fastest(), f"auto: the faster {source} at {row.label()}"
