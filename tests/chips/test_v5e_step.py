"""The TPU v5e step compiled here, without the chip: the splash kernel's forward runs once
per layer unless remat is ``full``, and the estimate prices the kernel at its measured rate
(every target's devices and hosts: ``test_every_target``). What the chip itself measured is in bench/results/tpu_v5e.json.
"""

from __future__ import annotations

import re

import pytest

from tests.chips.compiling import compile_train, require_aot, target_setup, tiny


def splash_calls(text: str) -> dict[str, int]:
    """Splash kernel calls of a compiled TPU program, by pass (fwd, dkv, dq)."""
    found: dict[str, int] = {}
    for part in re.findall(r"%splash_mha_(fwd|dkv|dq)\w*\.\d+ = ", text):
        found[part] = found.get(part, 0) + 1
    return found


@pytest.mark.parametrize(
    "level, forwards", [("none", 1), ("mlp", 1), ("attention", 1), ("full", 2)]
)
def test_the_kernel_forward_runs_twice_only_under_full_remat(level, forwards):
    require_aot()
    overrides = tiny("llama", f"sharding.remat={level}", "model.head_dim=64", seq_len=256)
    setup = target_setup("llama", "v5e-1", overrides)
    assert setup.attention == "splash" and setup.remat.level == level
    calls = splash_calls(compile_train(setup).as_text())
    # the layers are scanned: one call site per pass; the backward is fused (no dq of its own)
    assert calls == {"fwd": forwards, "dkv": 1}, calls


def test_the_v5e_plan_prices_splash_and_says_why_it_chose_its_remat(tmp_path):
    require_aot()
    from theseus.core.plan.dry_run import plan

    from tests.chips.test_dry_run_target import plan_config

    config = plan_config(*tiny("llama", "model.head_dim=64", seq_len=1024, batch=8))
    result = plan(config, str(tmp_path), target="v5e-1")
    assert result["fits"] and result["remat"] == "none"  # tiny: everything is kept
    assert result["remat_reason"].startswith("the most kept that fits: none")
    assert result["estimate_method"].startswith("estimate: roofline at 197 TFLOP/s bf16")
    assert re.search(
        r"splash attention \([\d.]+ ms\) at its rate measured on this chip$",
        result["estimate_method"],
    )
    assert result["estimate_by_kind"]["attention kernel"] > 0
    assert 0 < result["predicted_mfu"] < 1


@pytest.mark.parametrize(
    "extra, chunks, level",
    [
        ((), 1, "none"),  # 524 MB of logits fit whole at none: one piece
        (("training.loss_chunks=4",), 4, "none"),  # as given
        (("sharding.remat=none",), 2, "none"),  # a level given: the automatic pieces
    ],
)
def test_the_loss_is_taken_whole_where_its_logits_fit_at_a_cheap_level(extra, chunks, level):
    """2 rows x 2048 tokens x 32,000 float32 logits are 524 MB, over the 256 MiB a piece may
    hold: two pieces by size; on a v5e the plan takes the loss whole when that fits at
    ``none`` or ``mlp`` (the pieces cost more than recomputing the MLPs' hidden projections:
    bench/results/tpu_v5e_call16)."""
    require_aot()
    overrides = tiny("llama", "model.head_dim=64", *extra, seq_len=2048, batch=2, vocab=32000)
    setup = target_setup("llama", "v5e-1", overrides)
    assert (setup.loss_chunks, setup.remat.level) == (chunks, level), setup.remat.reason
    assert ("taken whole" in setup.remat.reason) == (not extra), setup.remat.reason
