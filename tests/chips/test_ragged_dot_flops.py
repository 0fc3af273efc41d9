"""``hlo_stats`` counts grouped-matmul Mosaic kernels (calls the compiler cannot see into) at
their routed FLOPs: XLA:TPU's for ``jax.lax.ragged_dot`` and megablox's ``gmm``/``tgmm``
(MaxText's), so the estimate prices the ``ragged_dot`` grouping and MaxText's experts by their
work, not as opaque calls."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from theseus.core.plan.hlo_stats import analyze

from tests.chips.compiling import compile_for_target, require_aot

M, D, F, E = 512, 256, 384, 4

# the kernel as XLA:TPU writes it: group metadata first, then rows [M, D] and groups [E, D, F]
KERNEL = f"""HloModule m, is_scheduled=true

ENTRY %main (x: bf16[{M},{D}], w: bf16[{E},{D},{F}], g: s32[{E}]) -> bf16[{M},{F}] {{
  %x = bf16[{M},{D}]{{1,0}} parameter(0)
  %w = bf16[{E},{D},{F}]{{2,1,0}} parameter(1)
  %g = s32[{E}]{{0}} parameter(2)
  %ragged-dot-metadata = (s32[{E + 1}]{{0}}, s32[39]{{0}}) custom-call(%g), custom_call_target="tpu_custom_call"
  %starts = s32[{E + 1}]{{0}} get-tuple-element(%ragged-dot-metadata), index=0
  ROOT %ragged-dot-none = bf16[{M},{F}]{{1,0}} custom-call(%starts, %x, %w), custom_call_target="tpu_custom_call"
}}
"""


def compiled_gradients(matmul) -> str:
    """The optimized HLO of both gradients of ``sum(matmul(x, w, sizes) ** 2)``, compiled
    for a v5e at the shape above (bf16 rows and groups)."""
    require_aot()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from theseus.core.chips.devices import compile_only_devices

    whole = NamedSharding(Mesh(compile_only_devices("v5e-1"), ("x",)), PartitionSpec())

    def loss(x, w, sizes):
        return jnp.sum(matmul(x, w, sizes).astype(jnp.float32) ** 2)

    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    x = jax.ShapeDtypeStruct((M, D), jnp.bfloat16, sharding=whole)
    w = jax.ShapeDtypeStruct((E, D, F), jnp.bfloat16, sharding=whole)
    sizes = jax.ShapeDtypeStruct((E,), jnp.int32, sharding=whole)
    return compile_for_target(step.lower(x, w, sizes)).as_text()


def test_a_ragged_dot_kernel_counts_each_row_through_one_group():
    stats = analyze(KERNEL)
    assert stats.flops == 2 * M * D * F  # not E times it, and not 0
    assert stats.opaque_kernels == 0  # the metadata kernel computes nothing to count
    # any other Mosaic call stays opaque
    other = analyze(KERNEL.replace("ragged-dot-none", "splash_mha_fwd"))
    assert other.flops == 0 and other.opaque_kernels == 1


def test_megablox_kernels_count_their_routed_flops_too():
    """MaxText's dropless experts: ``gmm`` as the ragged-dot kernel, and ``tgmm``, the weight
    gradient, from rows [M, D] and [M, F] into one [D, F] per group: 2 M D F, not E times."""
    gmm = KERNEL.replace("ragged-dot-none", "gmm.3")
    assert analyze(gmm).flops == 2 * M * D * F
    tgmm = f"""HloModule m, is_scheduled=true

ENTRY %main (x: bf16[{M},{D}], dy: bf16[{M},{F}], g: s32[{E + 1}]) -> bf16[{E},{D},{F}] {{
  %x = bf16[{M},{D}]{{1,0}} parameter(0)
  %dy = bf16[{M},{F}]{{1,0}} parameter(1)
  %g = s32[{E + 1}]{{0}} parameter(2)
  ROOT %tgmm.1 = bf16[{E},{D},{F}]{{2,1,0}} custom-call(%g, %x, %dy), custom_call_target="tpu_custom_call"
}}
"""
    assert analyze(tgmm).flops == 2 * M * D * F and analyze(tgmm).opaque_kernels == 0


def test_a_compiled_ragged_dot_forward_and_backward_count_what_the_chip_computes():
    """Compiled for a v5e: the forward and the input gradient are the grouped kernel (each
    2 M D F); the weight gradient a matmul masked per group, every row against all E groups
    (2 E M D F, counted as written)."""
    text = compiled_gradients(jax.lax.ragged_dot)
    assert "%ragged-dot" in text
    stats = analyze(text)
    assert stats.flops == 2 * (2 * M * D * F) + 2 * E * M * D * F
    assert stats.opaque_kernels == 0


def test_the_grouped_kernel_counts_the_routed_work_in_all_three_products():
    """theseus's ``grouped`` matmul compiled for a v5e: the forward and the input gradient are
    XLA's grouped kernel, the weight gradient theseus's (``tgmm_theseus``): 3 x 2 M D F in
    all, not the masked ``2 E M D F`` of ragged_dot's own weight gradient."""
    from theseus.models.layers.grouped_matmul import grouped_matmul

    text = compiled_gradients(grouped_matmul)
    assert "tgmm_theseus" in text
    stats = analyze(text)
    assert stats.flops == 3 * (2 * M * D * F)
    assert stats.opaque_kernels == 0


def test_the_pallas_kernels_count_the_routed_work_in_all_three_products():
    """theseus's ``pallas`` grouping compiled for a v5e: the forward and the input gradient
    are theseus's row kernel (``gmm_theseus``), the weight gradient its weight-gradient kernel;
    no ragged_dot is left, and 3 x 2 M D F are counted."""
    from theseus.models.layers.grouped_matmul import grouped_matmul

    text = compiled_gradients(lambda x, w, sizes: grouped_matmul(x, w, sizes, "kernel", "kernel"))
    rows_kernels = re.findall(r"(?<![t\w])gmm_theseus", text)
    assert rows_kernels and "tgmm_theseus" in text and "ragged-dot" not in text
    stats = analyze(text)
    assert stats.flops == 3 * (2 * M * D * F)
    assert stats.opaque_kernels == 0
