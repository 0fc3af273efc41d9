"""``model.moe_grouping=auto``: the grouped expert matmuls measured faster on the chip
(``chips/measured.json``'s ``moe_grouping`` table), ``tiles`` where nothing is measured."""

from __future__ import annotations

import pytest
from theseus.core.chips.measured import measured
from theseus.core.chips.moe_grouping import (
    MEASURED,
    ExpertShape,
    Measured,
    choose_grouping,
    nearest,
    speaks_for,
)

# the shape measured on the v5e (issue 46): d_model 1024, 8 experts of 1024, top-2
MIXTRAL_SMALL = ExpertShape(d_model=1024, moe_d_ff=1024, n_experts=8, k=2)
QWEN3_30B = ExpertShape(d_model=2048, moe_d_ff=768, n_experts=128, k=8)


def test_the_table_is_read_from_the_one_file_and_holds_the_v5e_measurement():
    rows = measured()["moe_grouping"]["chips"]["TPU v5 lite"]
    assert [r.tokens_per_s for r in MEASURED["TPU v5 lite"]] == [
        {g: float(v) for g, v in r["tokens_per_s"].items()} for r in rows
    ]
    eight, many = MEASURED["TPU v5 lite"]
    assert eight.tokens_per_s == {
        "tiles": 47333.0, "ragged_dot": 57702.0, "grouped": 60432.0, "pallas": 59012.0
    }  # fmt: skip
    assert eight.fastest() == "grouped"
    assert many.shape["n_experts"] == 128 and many.fastest() == "pallas"


@pytest.mark.parametrize(
    "platform, kind, shape, grouping, rule",
    [
        # the chip measured: the fastest grouping there, with the figures that chose it
        ("tpu", "TPU v5 lite", MIXTRAL_SMALL, "grouped",
         "auto: the fastest measured on TPU v5 lite at d_model 1024, 8 experts of 1024, top-2, "
         "T=2048 x 8 rows: grouped 60,432, pallas 59,012, ragged_dot 57,702, tiles 47,333 "
         "tokens/s"),
        # a TPU never measured takes the measured TPU's rows, and says so
        ("tpu", "TPU v5", MIXTRAL_SMALL, "grouped", "measured on TPU v5 lite, taken for TPU v5"),
        # 128 experts: the nearest row is the one measured at 128
        ("tpu", "TPU v5", QWEN3_30B, "pallas",
         "auto: the fastest measured on TPU v5 lite, taken for TPU v5 at d_model 1024, 128 "
         "experts of 384, top-8"),
        # 512 experts: the 128-expert row, won by pallas, speaks for every larger count
        ("tpu", "TPU v5 lite", ExpertShape(2048, 768, 512, 8), "pallas", "128 experts of 384"),
        ("tpu", "TPU v5 lite", ExpertShape(4096, 14336, 16, 2), "grouped", "measured on TPU v5 lite at"),
        # fewer experts than a factor 2 below the row: no row speaks for them
        ("tpu", "TPU v5 lite", ExpertShape(1024, 1024, 2, 1), "tiles", "near 2 experts"),
        # nothing measured off TPU: today's tiles (ragged_dot there computes every expert)
        ("cpu", "cpu", MIXTRAL_SMALL, "tiles", "auto on cpu: no grouping measured there"),
        ("gpu", "NVIDIA H100 80GB HBM3", MIXTRAL_SMALL, "tiles", "auto on gpu: no grouping"),
    ],
)  # fmt: skip
def test_auto_takes_the_faster_grouping_measured_for_the_chip(
    platform, kind, shape, grouping, rule
):
    chosen, why = choose_grouping("auto", platform, kind, shape)
    assert chosen == grouping
    assert rule in why, why


def test_a_grouping_asked_for_by_name_is_kept_on_every_chip():
    for asked in ("tiles", "ragged_dot", "grouped", "pallas"):
        for platform, kind in (("tpu", "TPU v5 lite"), ("cpu", "cpu")):
            chosen, why = choose_grouping(asked, platform, kind, MIXTRAL_SMALL)
            assert (chosen, why) == (asked, f"model.moe_grouping={asked}")


def test_the_nearest_row_decides_where_two_shapes_disagree():
    """Two made-up rows whose faster groupings differ: a shape takes its neighbour's."""
    small = Measured(
        {"d_model": 1024, "moe_d_ff": 1024, "n_experts": 8, "k": 2, "seq_len": 2048, "rows": 8},
        {"tiles": 1.0, "ragged_dot": 2.0},
        "x",
    )
    wide = Measured(
        {"d_model": 4096, "moe_d_ff": 768, "n_experts": 128, "k": 8, "seq_len": 4096, "rows": 2},
        {"tiles": 3.0, "ragged_dot": 2.0},
        "y",
    )
    assert nearest([small, wide], MIXTRAL_SMALL) is small
    assert nearest([small, wide], QWEN3_30B) is wide
    assert nearest([small, wide], QWEN3_30B).fastest() == "tiles"


def test_only_a_row_won_by_the_routed_grouping_speaks_for_many_more_experts():
    """A row won by ``ragged_dot`` (whose weight gradient is written as E times the routed
    work) or ``tiles`` (a weight copy per tile) reaches 2x its expert count; one won by
    ``grouped`` or ``pallas`` every larger count, never a count 2x below its own."""
    shape = {"d_model": 1024, "moe_d_ff": 1024, "n_experts": 8, "k": 2, "seq_len": 2048, "rows": 8}
    groupings = ("tiles", "ragged_dot", "grouped", "pallas")
    winners = (("ragged_dot", False), ("tiles", False), ("grouped", True), ("pallas", True))
    for winner, reaches_128 in winners:
        row = Measured(shape, {g: float(g == winner) for g in groupings}, "x")
        assert speaks_for(row, QWEN3_30B) is reaches_128
        assert speaks_for(row, ExpertShape(1024, 1024, 16, 2))
        assert not speaks_for(row, ExpertShape(1024, 1024, 2, 1))
