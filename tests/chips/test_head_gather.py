"""The chunked loss's output head is gathered once per step, not once per piece: the train step
of a tiny Llama with a 151,936-token vocabulary (Qwen3's), T=512, under fsdp on v5p-8 (4 chips),
its loss taken in 4 pieces, compiled for the chips without them."""

from __future__ import annotations

import pytest

from tests.chips.compiling import compile_train, require_aot, target_setup, tiny

VOCAB = 151_936


@pytest.mark.slow
def test_the_head_table_moves_once_not_once_per_loss_piece():
    """T, the head's table in bf16 (64 x 151,936 x 2 B = 19.4 MB), gathered once for the
    forward and the recomputing backward (about T) and its gradient summed once, round a ring
    of permutes over the 4 chips (3/4 T): measured 19.8 MB of all-gather and 14.6 MB of
    permutes, 0.15 MB of all-reduce (the other parameters' norms). Left to the compiler inside
    the loss's scan it moved 156 MB of all-gather and 78 MB of all-reduce (12 T); gathered by
    a sharding constraint, 19.8 MB and an all-reduce of the whole table, 19.6 MB. The bounds:
    3 T in all (room for the other parameters, 0.4 MB of the tiny stack), and an all-reduce
    of at most T / 10, which a whole-table all-reduce fails."""
    require_aot()
    from theseus.core.plan.hlo_stats import analyze

    # 4 pieces asked for: the plan would take this small step's loss whole
    extra = ("sharding.strategy=fsdp", "training.loss_chunks=4")
    values = [v for v in tiny("llama", *extra, seq_len=512) if "vocab" not in v]
    setup = target_setup("llama", "v5p-8", [*values, f"model.vocab_size={VOCAB}"])
    assert setup.loss_chunks == 4 and setup.layout.sizes["fsdp"] == 4
    table = setup.config.model.d_model * VOCAB * 2
    stats = analyze(compile_train(setup).as_text())
    moved = sum(stats.collective_bytes.get(k, 0.0) for k in ("all-gather", "all-reduce"))
    moved += stats.collective_bytes.get("collective-permute", 0.0)
    assert moved < 3 * table, (stats.collective_bytes, table)
    assert stats.collective_bytes.get("all-reduce", 0.0) < table / 10, stats.collective_bytes
