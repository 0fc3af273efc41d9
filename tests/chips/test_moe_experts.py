"""A mixture's expert weights are not all-reduced whole: the train step of a tiny Qwen3-MoE
compiled for v5p-64 (32 chips) without the chip, under the automatic expert axis of a run
with a capacity (``sharding.expert=0``, ``sharding.expert_capacity=1.25``) and under the
fsdp-only mesh (``sharding.expert=1``, what a dropless run gets by default on TPUs). With the expert
axis, the tokens travel to their experts by ``ragged-all-to-all`` (the plan's dispatch on
TPU)."""

from __future__ import annotations

import pytest

from tests.chips.compiling import compile_train, require_aot, target_setup, tiny

LAYERS, EXPERTS, D, F = 2, 4, 64, 128  # the tiny preset's experts, wider (moe_d_ff=128)


def all_reduce_bytes(expert: str) -> tuple[float, float, dict[str, int], dict[str, float]]:
    """(all-reduce bytes per chip, the expert weights' bytes whole, the mesh, the bytes of
    every collective kind)."""
    import numpy as np
    from theseus.core.plan.hlo_stats import analyze

    extra = ("sharding.strategy=fsdp", f"sharding.expert={expert}", f"model.moe_d_ff={F}")
    if expert == "0":  # on TPUs the automatic axis is for runs that may drop tokens
        extra = (*extra, "sharding.expert_capacity=1.25")
    setup = target_setup("qwen3_moe", "v5p-64", tiny("qwen3_moe", *extra, batch=64))
    assert setup.config.model.n_layers == LAYERS and setup.config.model.n_experts == EXPERTS
    itemsize = np.dtype(setup.execution.compute_dtype).itemsize  # gradients in compute dtype
    whole = LAYERS * 3 * EXPERTS * D * F * itemsize  # gate, up, down
    stats = analyze(compile_train(setup).as_text())
    moved = dict(stats.collective_bytes)
    return moved.get("all-reduce", 0.0), whole, dict(setup.layout.sizes), moved


@pytest.mark.slow
@pytest.mark.parametrize("expert", ["0", "1"])
def test_expert_weights_are_not_all_reduced_whole(expert):
    """The bound is W, the bytes of every expert weight whole (2 layers x gate, up, down of
    4 x 64 x 128, in bf16: 393,216). Under fsdp only (32 x 1) each chip runs every expert
    on its own tokens and all-reduces each expert weight's gradient whole: at least W
    (measured 399,232). The automatic mesh with a capacity (fsdp 8 x expert 4) gives each
    chip one expert,
    whose gradient is summed over fsdp only (W / 4) beside the small norm, router and
    statistics terms (measured 104,332 with the 1.25 capacity slabs): under W."""
    require_aot()
    got, whole, sizes, moved = all_reduce_bytes(expert)
    if expert == "0":
        assert (sizes["fsdp"], sizes["expert"]) == (8, 4)
        assert got < whole, f"{got:.0f} all-reduce bytes per chip, expert weights {whole}"
        # the tokens' rows go by the ragged exchange; what plain all-to-all is left (the
        # embedding's gradient) is smaller
        assert moved.get("ragged-all-to-all", 0) > moved.get("all-to-all", 0), moved
    else:
        assert (sizes["fsdp"], sizes["expert"]) == (32, 1)
        assert got >= whole, f"fsdp only: {got:.0f} bytes, expert weights {whole}"
