"""``hlo_stats`` on compiled programs whose FLOPs, trip counts and collectives are known."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec
from theseus.core.plan.hlo_stats import analyze, collective_kind, parse_shapes

from tests.chips.compiling import compile_for_target, require_aot

L, M, K = 5, 64, 128


def layers(x, ws):
    """L matmuls in a scan: 2 * M * K * K FLOPs each."""
    return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]


def test_a_scanned_loop_counts_as_many_times_as_it_runs():
    x = jax.ShapeDtypeStruct((M, K), jnp.float32)
    ws = jax.ShapeDtypeStruct((L, K, K), jnp.float32)
    stats = analyze(jax.jit(layers).lower(x, ws).compile().as_text())
    assert stats.flops == L * 2 * M * K * K  # exact: every dot, times the trip count
    assert stats.flops_once == 2 * M * K * K  # what XLA's own cost analysis would say
    assert stats.dynamic_loops == 0
    # every weight is read once and every activation written: at least that much traffic
    assert stats.bytes >= 4 * (L * K * K + L * M * K)


def test_a_scanned_layer_reads_its_slice_of_the_stacked_weights_not_all_of_them():
    """Per trip of a scan over 32 stacked K x K weights (f32), at most: the slice read and
    written (2 K K), the matmul's weight, input and output (K K + 2 M K), tanh in and out
    (2 M K), and a few scalars of loop bookkeeping (64 bytes); plus x copied in once. Were
    the whole stack counted as read on every trip, it would add (L - 1) K K per trip."""
    depth = 32
    x = jax.ShapeDtypeStruct((M, K), jnp.float32)
    ws = jax.ShapeDtypeStruct((depth, K, K), jnp.float32)
    stats = analyze(jax.jit(layers).lower(x, ws).compile().as_text())
    per_trip = 4 * (3 * K * K + 4 * M * K) + 64
    assert stats.bytes <= depth * per_trip + 2 * 4 * M * K
    assert stats.bytes >= 4 * depth * (K * K + M * K)  # every weight and activation once


def test_a_loop_with_bounds_known_only_at_run_time_is_counted_once_and_reported():
    def f(x, w, n):
        return jax.lax.fori_loop(0, n, lambda i, h: h @ w, x)

    x, w = jax.ShapeDtypeStruct((M, K), jnp.float32), jax.ShapeDtypeStruct((K, K), jnp.float32)
    n = jax.ShapeDtypeStruct((), jnp.int32)
    stats = analyze(jax.jit(f).lower(x, w, n).compile().as_text())
    assert stats.dynamic_loops == 1 and stats.flops == 2 * M * K * K


def test_collectives_on_the_tpu_compiler_are_counted_per_chip_and_per_trip():
    """Each trip all-gathers a weight sharded 4 ways: a result of K x K bf16 per chip."""
    require_aot()
    from theseus.core.chips.devices import compile_only_devices

    mesh = jax.make_mesh(
        (4,), ("x",), (jax.sharding.AxisType.Auto,), devices=compile_only_devices("v5p-8")
    )
    whole, split = (
        NamedSharding(mesh, PartitionSpec()),
        NamedSharding(mesh, PartitionSpec(None, "x")),
    )

    def f(x, ws):
        def body(h, w):
            w = jax.lax.with_sharding_constraint(w, whole)  # gathered for the matmul
            return jnp.tanh(h @ w), None

        return jax.lax.scan(body, x, ws)[0]

    x = jax.ShapeDtypeStruct((M, K), jnp.bfloat16, sharding=whole)
    ws = jax.ShapeDtypeStruct((L, K, K), jnp.bfloat16, sharding=split)
    stats = analyze(compile_for_target(jax.jit(f).lower(x, ws)).as_text())
    assert set(stats.collective_bytes) == {"all-gather"}
    assert stats.collective_bytes["all-gather"] == L * K * K * 2
    assert stats.flops == L * 2 * M * K * K  # XLA:TPU writes the matmul as a convolution


def test_a_ragged_all_to_all_counts_what_a_balanced_routing_sends():
    """The expert dispatch's exchange (``layers/ragged_exchange.py``) on 4 chips: each sends
    its 6 rows of 1024 bf16 into receive buffers of 8 rows. What it moves depends on the
    routing; counted: the smaller of the data sent and the buffer, 6 rows. (Rows of 128
    are padded to 256 by XLA:TPU, and counted as such.)"""
    require_aot()
    from theseus.core.chips.devices import compile_only_devices
    from theseus.models.layers.ragged_exchange import exchange, plan_routes

    mesh = jax.make_mesh(
        (4,), ("x",), (jax.sharding.AxisType.Auto,), devices=compile_only_devices("v5p-8")
    )

    def send(rows, counts):
        routes = plan_routes(counts[0], 8, "x")
        return exchange(rows, routes, 8, "x", native=True)

    split = NamedSharding(mesh, PartitionSpec("x"))
    run = jax.shard_map(send, mesh=mesh, in_specs=(PartitionSpec("x"),) * 2,
                        out_specs=PartitionSpec("x"))  # fmt: skip
    width = 1024
    rows = jax.ShapeDtypeStruct((4 * 6, width), jnp.bfloat16, sharding=split)
    counts = jax.ShapeDtypeStruct((4, 4), jnp.int32, sharding=split)
    stats = analyze(compile_for_target(jax.jit(run).lower(rows, counts)).as_text())
    assert stats.collective_bytes["ragged-all-to-all"] == 6 * width * 2
    assert collective_kind("ragged-all-to-all") == "ragged-all-to-all"


@pytest.mark.parametrize(
    "opcode, kind",
    [
        ("all-gather", "all-gather"),
        ("all-gather-start", "all-gather"),
        ("all-gather-done", None),
        ("reduce-scatter", "reduce-scatter"),
        ("all-reduce-start", "all-reduce"),
        ("collective-permute-start", "collective-permute"),
        ("fusion", None),
    ],
)
def test_collective_kinds(opcode, kind):
    assert collective_kind(opcode) == kind


def test_shapes_of_tuples_and_tiled_layouts():
    text = "(bf16[2,256,64]{1,2,0:T(8,128)(2,1)}, s32[]{:T(128)}, u8[0]{0}, token[])"
    assert parse_shapes(text) == [
        ("bf16", (2, 256, 64)),
        ("s32", ()),
        ("u8", (0,)),
        ("token", ()),
    ]


def hand_written_matmul(dtype: str) -> str:
    return f"""HloModule m

ENTRY %main (a: {dtype}[256,512], b: {dtype}[512,128]) -> {dtype}[256,128] {{
  %a = {dtype}[256,512]{{1,0}} parameter(0)
  %b = {dtype}[512,128]{{1,0}} parameter(1)
  ROOT %d = {dtype}[256,128]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def test_float32_matmuls_are_priced_at_their_own_rate():
    """A GPU runs float32 matmuls as TF32 at half the bf16 rate: an H200 profile found 17% of a
    GPT step in them, which a roofline at the bf16 peak alone did not see."""
    flops = 2 * 256 * 512 * 128
    peak, f32_peak, bandwidth = 1e12, 0.5e12, 1e20  # bandwidth out of the way
    f32 = analyze(hand_written_matmul("f32"), peak, bandwidth, f32_peak)
    bf16 = analyze(hand_written_matmul("bf16"), peak, bandwidth, f32_peak)
    assert f32.flops == bf16.flops == flops
    assert (f32.float32_flops, bf16.float32_flops) == (flops, 0)
    assert f32.roofline_seconds == pytest.approx(flops / f32_peak, rel=1e-9)
    assert bf16.roofline_seconds == pytest.approx(flops / peak, rel=1e-9)
    unpriced = analyze(hand_written_matmul("f32"), peak, bandwidth)  # no float32 rate: as bf16
    assert unpriced.roofline_seconds == pytest.approx(flops / peak, rel=1e-9)


def test_a_scanned_matmul_whose_stack_is_kept_counts_slices_not_stacks():
    """A scan keeping every layer's matmul output (as a remat policy keeping matmuls does),
    compiled for a v5e: the TPU compiler slices the layer's weight inside a fusion nested in
    the matmul's, and writes the output into its slot of the L-deep stack. Per trip at most:
    the weight slice, the matmul's input, its outputs and the slot (M K each), the tanh in and
    out, and bookkeeping; counting the whole weight stack as read on every trip (as before
    nested fusions were followed) would add (depth - 1) K K per trip."""
    require_aot()
    from theseus.core.chips.devices import compile_only_devices

    depth = 32
    mesh = jax.make_mesh(
        (1,), ("x",), (jax.sharding.AxisType.Auto,), devices=compile_only_devices("v5e-1")
    )
    whole = NamedSharding(mesh, PartitionSpec())

    def f(x, ws):
        def body(h, w):
            y = (h @ w).astype(jnp.bfloat16)
            return jnp.tanh(y), y

        return jax.lax.scan(body, x, ws)

    x = jax.ShapeDtypeStruct((M, K), jnp.bfloat16, sharding=whole)
    ws = jax.ShapeDtypeStruct((depth, K, K), jnp.bfloat16, sharding=whole)
    stats = analyze(compile_for_target(jax.jit(f).lower(x, ws)).as_text())
    per_trip = 2 * (2 * K * K + 6 * M * K) + 64
    assert stats.bytes <= depth * per_trip + 2 * 2 * M * K * (depth + 1)
