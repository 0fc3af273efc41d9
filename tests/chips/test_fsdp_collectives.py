"""What a tiny Llama's train step under fsdp and full remat on v5p-8 (4 chips) moves, compiled
for the chips without them, against what MaxText's step moves for the same work:

* each attention projection's kernel is gathered whole twice per layer and step (the
  forward, and the backward's recomputing forward, whose copy the gradient matmuls reuse).
  The projections used to reshape their kernel (embed x heads x head_dim as a matrix) before
  the matmul; XLA then laid the backward's copy out apart from the forward's and gathered
  the output, key and value kernels a third time per layer (this test's count: 3 per layer;
  Llama 3.1 8B on v5p-8: 1.5 GiB more all-gather per step than MaxText);
* every all-to-all moves the compute dtype (bfloat16): the embedding's gradient used to
  travel from the batch's layout to the table's in float32 (Llama 3.1 8B on v5p-8: 0.25 GiB
  per step against MaxText's 0.125; this test's old count: one float32 all-to-all).

And on v5p-128 (64 chips, a torus), the same step gathers its kernels as all-gathers: the
target's devices used to be made without the slice's wraparound links, and XLA:TPU then
lowered every gather over the open 4x4x4 mesh as an all-reduce of a zero-padded kernel
(twice the bytes on the links; Llama 3.1 70B on v5p-256: 398 GiB of all-reduce per step).
There, too, each attention kernel is gathered twice per layer: a layer gathers its kernel
once (``models/layers/linear.py``), and the recompute and the gradient share that copy.
"""

from __future__ import annotations

import math

import pytest

from tests.chips.compiling import compile_train, require_aot, target_setup, tiny

D, HEADS, KV_HEADS, HEAD_DIM, FF, LAYERS = 512, 8, 2, 64, 1536, 4
# a vocabulary larger than the step's 4096 tokens, as at real sizes: XLA then moves the
# embedding's gradient to the table's layout as an all-to-all (at 256 rows it sums the
# whole small table on each chip instead)
VOCAB = 32768


def whole_gathers(text: str, elements: int) -> float:
    """All-gathers per step (loops counted by their trip counts) whose result is one whole
    array of ``elements`` elements."""
    from theseus.core.plan import hlo_stats

    ran, _ = hlo_stats.step_instructions(text)
    return sum(
        runs * [math.prod(dims) for _, dims in instruction.result if dims].count(elements)
        for instruction, runs in ran
        if hlo_stats.collective_kind(instruction.opcode) == "all-gather"
    )


def compiled_step(target: str, chips: int) -> str:
    """The optimized HLO of the tiny Llama's fsdp train step on ``target``, a row per chip
    on v5p-128."""
    require_aot()
    values = tiny(
        "llama",
        "sharding.strategy=fsdp",
        "sharding.remat=full",
        f"model.d_model={D}",
        f"model.n_heads={HEADS}",
        f"model.n_kv_heads={KV_HEADS}",
        f"model.head_dim={HEAD_DIM}",
        f"model.d_ff={FF}",
        f"model.n_layers={LAYERS}",
        seq_len=512,
        batch=max(8, chips),
        vocab=VOCAB,
    )
    setup = target_setup("llama", target, values)
    assert setup.layout.sizes["fsdp"] == chips
    return compile_train(setup).as_text()


@pytest.fixture(scope="module")
def step_text() -> str:
    return compiled_step("v5p-8", 4)


@pytest.mark.slow
def test_attention_kernels_are_gathered_twice_per_layer(step_text: str):
    # query and output kernels share a size (D x HEADS x HEAD_DIM), key and value another
    query_output = whole_gathers(step_text, D * HEADS * HEAD_DIM)
    key_value = whole_gathers(step_text, D * KV_HEADS * HEAD_DIM)
    assert 0 < query_output <= 2 * 2 * LAYERS, query_output
    assert 0 < key_value <= 2 * 2 * LAYERS, key_value


@pytest.mark.slow
def test_every_all_to_all_moves_the_compute_dtype(step_text: str):
    from theseus.core.plan import hlo_stats

    ran, _ = hlo_stats.step_instructions(step_text)
    moved = [
        dtype
        for instruction, _ in ran
        if hlo_stats.collective_kind(instruction.opcode) == "all-to-all"
        for dtype, dims in instruction.result
        if dims
    ]
    assert moved and set(moved) == {"bf16"}, moved


@pytest.mark.slow
def test_collective_diff_lists_what_the_plan_counts(step_text: str):
    """bench/collective_diff.py's listing sums, kind by kind, to hlo_stats' totals, and names
    the gathered MLP kernel by its shape."""
    from theseus.core.plan.hlo_stats import analyze

    from tests.chips.test_scale_vs_maxtext import load

    listing = load("collective_diff").collectives(step_text)
    by_kind: dict[str, float] = {}
    for (kind, _, _), (_, moved) in listing.items():
        by_kind[kind] = by_kind.get(kind, 0.0) + moved
    assert by_kind == pytest.approx(analyze(step_text).collective_bytes, rel=1e-12)
    shapes = {shape for kind, shape, _ in listing if kind == "all-gather"}
    assert any(f"{D}, {FF}]" in shape for shape in shapes), shapes


@pytest.mark.slow
def test_a_torus_slice_gathers_kernels_as_all_gathers():
    from theseus.core.plan import hlo_stats

    text = compiled_step("v5p-128", 64)
    query_output = whole_gathers(text, D * HEADS * HEAD_DIM)
    key_value = whole_gathers(text, D * KV_HEADS * HEAD_DIM)
    mlp = whole_gathers(text, D * FF)
    assert query_output >= 2 * LAYERS and mlp >= 3 * LAYERS, (query_output, mlp)
    # twice per kernel and layer, as on v5p-8: with the compiler left to gather a kernel
    # for each matmul, the backward gathered the query kernel and one of key and value a
    # second time for the input's gradient (20 and 20 here; 70B on v5p-256: 11 GiB a step)
    assert query_output <= 2 * 2 * LAYERS and key_value <= 2 * 2 * LAYERS, (
        query_output,
        key_value,
    )
    # what is all-reduced is the gradients, once per step: no whole kernel per layer pass
    ran, _ = hlo_stats.step_instructions(text)
    reduced = sum(
        runs
        for instruction, runs in ran
        if hlo_stats.collective_kind(instruction.opcode) == "all-reduce"
        for _, dims in instruction.result
        if math.prod(dims) == D * FF
    )
    assert reduced <= 3 * LAYERS, reduced
