"""What makes the TPU step fast, checked without a TPU: splash's measured block table, its
fused backward in the Pallas interpreter, remat levels that change memory and never the
gradients (tests/chips counts the kernel's forward calls in the compiled program), and the
cross entropy taken a piece of the sequence at a time.

Tolerances: the remat levels and the loss chunks compute the same float32 sums, recomputed
or taken in another order; a gradient is a sum over the B * T tokens of every layer's
contribution, so it may move by about eps * sqrt(B * T) * max|g| (``MARGIN`` of it allowed),
where a wrong residual or a missing chunk moves it by orders of magnitude more.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.ad_checkpoint import print_saved_residuals
from theseus.core.errors import ConfigError
from theseus.core.execution import AttentionKernel, ExecutionPlan, RematChoice
from theseus.core.sharding import remat
from theseus.core.train import remat_choice
from theseus.core.train.chunked_loss import CHUNK_BYTES, chunked_cross_entropy, loss_chunks
from theseus.core.train.step import Forward, summed_loss
from theseus.models.layers.rope import RoPE, rotate
from theseus.models.splash_blocks import DEFAULT, SplashBlocks, splash_blocks

from tests.models.conftest import VOCAB, tiny
from tests.models.test_attention_impls import compare, layer, mask_info, output_and_grads

EPS = float(np.finfo(np.float32).eps)
MARGIN = 4.0


def test_the_table_picks_measured_blocks_and_clamps_them_to_the_sequence():
    long = splash_blocks("TPU v5 lite", 2048, 64)
    assert (long.q, long.kv, long.kv_compute, long.fused_bwd) == (1024, 1024, 512, True)
    short = splash_blocks("TPU v5 lite", 512, 64)
    assert (short.q, short.kv, short.kv_compute, short.fused_bwd) == (512, 512, 512, True)
    assert splash_blocks("TPU v5 lite", 16384, 128) == long
    assert not splash_blocks("TPU v5 lite", 32768, 64).fused_bwd  # its dq partials: 8.6 GB
    assert splash_blocks("TPU v5 lite", 200, 64).q == 256  # clamped to the padded length
    assert splash_blocks("a chip never measured", 4096, 64) == DEFAULT
    clamped = long.clamped(384)
    assert (clamped.q, clamped.kv, clamped.kv_compute, clamped.padded_to) == (384, 384, 384, 384)
    assert SplashBlocks(1024, 1024, 512).clamped(256).kv_compute == 256


@pytest.mark.parametrize("head_dim", [64, 128])
def test_clamped_blocks_are_valid_for_every_length(head_dim):
    """The kernel refuses a compute block that does not divide its block, and the sequence
    is padded to the common multiple of every block: at every length the blocks must nest,
    and a sequence that fits in one block is padded by less than the lane width (a GRPO
    learning bucket of 552 tokens once got kv 640 beside kv_compute 512)."""
    for length in range(1, 5000, 3):
        blocks = splash_blocks("TPU v5 lite", length, head_dim)
        assert blocks.kv % blocks.kv_compute == 0, (length, blocks)
        assert blocks.kv_dkv % blocks.kv_dkv_compute == 0, (length, blocks)
        step = blocks.padded_to
        padded = -(-length // step) * step
        if length <= 1024:
            assert padded - length < 128, (length, blocks)
        assert padded < 2 * length + 1024, (length, blocks)


def test_fused_backward_in_the_interpreter_equals_reference():
    B, H, K, T = 1, 2, 64, 200
    x = jax.random.normal(jax.random.key(5), (B, T, 32))
    info = mask_info(B, T, packed=True)
    reference = layer(heads=H, kv_heads=1, head_dim=K, impl="reference")
    reference.query_block = 0
    blocks = SplashBlocks(256, 256, 128, 256, 256, 128, fused_bwd=True)
    plan = ExecutionPlan(attention=AttentionKernel("splash", blocks=blocks))
    splash = layer(heads=H, kv_heads=1, head_dim=K, impl="splash", execution=plan)
    splash.kernel_interpret = True
    want = output_and_grads(reference, x, info)
    got = output_and_grads(splash, x, info)
    compare(got, want, {"out": T, "grad": B * T * H}, "splash, fused backward")


@pytest.mark.parametrize("level", ["block", "mlp", "attention", "full"])
def test_remat_levels_change_memory_not_gradients(level):
    params = nnx.state(tiny("llama", n_layers=3), nnx.Param)
    tokens = jax.random.randint(jax.random.key(1), (2, 32), 1, VOCAB)
    batch = {
        "inputs": tokens,
        "targets": jnp.roll(tokens, -1, axis=1),
        "positions": jnp.broadcast_to(jnp.arange(32), (2, 32)),
        "segment_ids": jnp.ones((2, 32), jnp.int32),
        "loss_mask": jnp.ones((2, 32), jnp.float32),
    }

    def grads(level: str) -> list[np.ndarray]:
        execution = ExecutionPlan(remat=RematChoice(level, "the level under test"))
        graphdef, _, rest = nnx.split(tiny("llama", execution, n_layers=3), nnx.Param, ...)
        forward = Forward(graphdef, rest)
        fn = jax.jit(jax.grad(lambda p: summed_loss(forward, p, batch)[0]))
        return [np.asarray(g) for g in jax.tree.leaves(fn(params))]

    for got, want in zip(grads(level), grads("none"), strict=True):
        tol = MARGIN * EPS * np.sqrt(2 * 32) * float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= tol


def test_the_loss_in_pieces_equals_the_whole():
    B, T, D, V = 2, 48, 16, 40
    keys = jax.random.split(jax.random.key(2), 4)
    hidden = jax.random.normal(keys[0], (B, T, D))
    table = jax.random.normal(keys[1], (V, D))
    targets = jax.random.randint(keys[2], (B, T), 0, V)
    mask = (jax.random.uniform(keys[3], (B, T)) > 0.2).astype(jnp.float32)

    def whole(hidden, table):
        logits = hidden @ table.T
        losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
        return jnp.sum(losses * mask)

    def pieces(hidden, table):
        return chunked_cross_entropy(lambda h: h @ table.T, hidden, targets, mask, 4)

    want, want_grads = jax.value_and_grad(whole, argnums=(0, 1))(hidden, table)
    got, got_grads = jax.jit(jax.value_and_grad(pieces, argnums=(0, 1)))(hidden, table)
    assert abs(float(got) - float(want)) <= MARGIN * EPS * np.sqrt(B * T) * float(want)
    for g, w in zip(got_grads, want_grads, strict=True):
        tol = MARGIN * EPS * np.sqrt(B * T) * float(np.abs(w).max())
        assert float(np.abs(np.asarray(g) - np.asarray(w)).max()) <= tol


def test_the_loss_backward_starts_after_its_forward():
    """Under ``jax.grad`` the loss's forward scan only yields the loss value (the backward
    scan recomputes its pieces), so nothing ordered it: XLA:TPU ran it after the layers'
    backward loop and kept the gathered head table and the last hidden states alive through
    it (Llama 3.1 70B on v5p-256: 2.1 GB more live, peak 37.6 GiB against MaxText's 34.4).
    The loss's cotangent now passes an optimization barrier with the forward's total, so the
    backward scan, and everything after it, waits for the forward one."""
    B, T, D, V = 2, 48, 16, 40
    hidden, table = jnp.ones((B, T, D)), jnp.ones((V, D))
    targets, mask = jnp.zeros((B, T), jnp.int32), jnp.ones((B, T))

    def pieces(hidden, table):
        return chunked_cross_entropy(lambda h: h @ table.T, hidden, targets, mask, 4)

    eqns = jax.make_jaxpr(jax.value_and_grad(pieces, argnums=(0, 1)))(hidden, table).eqns
    names = [e.primitive.name for e in eqns]
    scans = [i for i, name in enumerate(names) if name == "scan"]
    forward_total = {id(v) for v in eqns[scans[0]].outvars}
    barriers = [
        i
        for i, name in enumerate(names)
        if name == "optimization_barrier" and any(id(v) in forward_total for v in eqns[i].invars)
    ]
    assert barriers, names
    assert any(i > barriers[0] for i in scans), names  # the backward scan comes after


def test_loss_chunks_keep_a_piece_under_the_limit():
    assert loss_chunks(8, 2048, 32000) == 8  # 2 GiB of float32 logits -> 8 pieces of 250 MiB
    assert loss_chunks(2, 256, 8192) == 1  # small: the whole at once
    assert loss_chunks(8, 2048, 32000, context=2) == 1  # a sequence split over devices
    for rows, length, vocab in [(8, 2048, 32000), (1, 32768, 151936), (32, 1024, 8192)]:
        chunks = loss_chunks(rows, length, vocab)
        assert length % chunks == 0 and rows * length // chunks * vocab * 4 <= CHUNK_BYTES
    assert loss_chunks(8, 2048, 32000, given=2) == 2  # training.loss_chunks: as given
    assert loss_chunks(8, 2048, 32000, context=2, given=1) == 1
    with pytest.raises(ConfigError, match=r"training.loss_chunks=4 with the sequence split"):
        loss_chunks(8, 2048, 32000, context=2, given=4)


def test_auto_remat_keeps_the_most_that_fits():
    kept = {"none": 10, "mlp": 6, "attention": 3, "full": 1}
    choose = remat_choice.choose_remat
    assert choose("auto", "tpu", 100, 50, kept.get, layers=100).level == "none"
    assert choose("auto", "tpu", 60, 48, kept.get, layers=100).level == "mlp"
    assert choose("auto", "tpu", 56, 48, kept.get, layers=100).level == "attention"
    assert choose("auto", "tpu", 50, 45, kept.get, layers=100).level == "full"
    assert choose("auto", "cpu", 10, 45, kept.get).level == "none"  # host memory
    assert choose("mlp", "tpu", 1, 45, kept.get).reason == "sharding.remat as configured"
    assert "nothing fits" in choose("auto", "tpu", 10, 45, kept.get).reason


def test_every_level_has_a_policy_and_the_config_knows_it():
    from theseus.core.sharding.config import REMAT

    assert set(REMAT) == {"auto", *remat.LEVELS}
    for level in remat.LEVELS:
        assert callable(remat.policy(level))
    with pytest.raises(Exception, match="sharding.remat='auto' is not one of"):
        remat.policy("auto")


def halves_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """The textbook form: the two halves of each head rotated and put back together."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    c, s = cos[..., : x.shape[-1] // 2], sin[..., : x.shape[-1] // 2]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_rotary_half_swap_as_a_matmul_equals_the_halves_form(dtype):
    """The swap is a product with a signed permutation: exact in float32 (every pass of the
    matrix unit) and in bf16 (one nonzero term per output). In bf16, ``x * cos`` is rounded to
    bf16 before the sum (as transformers computes it in bf16), so the two forms may differ by
    about one bf16 rounding of |x| (2^-8 relative), never more."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 7, 3, 64)), dtype)
    angles = jnp.asarray(rng.uniform(0, 100, size=(2, 7, 1, 32)), jnp.float32)
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)
    got, want = rotate(x, cos, sin), halves_rope(x, cos, sin)
    bound = 0.0 if dtype == jnp.float32 else 2.0**-7 * float(jnp.max(jnp.abs(x)))
    assert float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32)))) <= bound
    g = jnp.asarray(rng.normal(size=x.shape), jnp.float32)
    grad = jax.vjp(lambda v: rotate(v, cos, sin).astype(jnp.float32), x.astype(jnp.float32))[1]
    want_grad = jax.vjp(lambda v: halves_rope(v, cos, sin), x.astype(jnp.float32))[1]
    assert float(jnp.max(jnp.abs(grad(g)[0] - want_grad(g)[0]))) <= 8 * EPS * float(
        jnp.max(jnp.abs(g))
    )


def test_no_remat_level_keeps_the_rotary_swap(capsys):
    """``none`` keeps matmul outputs, but the swap's (a per-head 64 x 64 product) is cheaper
    redone inside the backward's fusion than stored: only the projection is kept."""
    w = jnp.ones((256, 256), jnp.bfloat16)
    rope = RoPE(64, 10000.0)

    def f(x: jax.Array, w: jax.Array, positions: jax.Array) -> jax.Array:
        q = rope((x @ w).reshape(2, 16, 4, 64), positions)
        return (q.astype(jnp.float32) ** 2).sum()

    x = jnp.ones((2, 16, 256), jnp.bfloat16)
    positions = jnp.broadcast_to(jnp.arange(16), (2, 16))
    checkpointed = jax.checkpoint(f, policy=remat.policy("none"))
    print_saved_residuals(checkpointed, x, w, positions)
    kept = [line.split(" ")[0] for line in capsys.readouterr().out.splitlines()]
    assert "bf16[2,16,256]" in kept  # the projection
    assert "bf16[2,16,4,64]" not in kept  # neither the swap nor the rotated heads
