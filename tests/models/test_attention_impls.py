"""The attention implementations (``model.attention``) against the reference stages.

Tolerances (float32, unit roundoff u = eps / 2 = 6e-8). ``flash`` computes the same sums as
the reference in another order: each output is a convex combination of S value rows, summed
block by block and rescaled once per key block (exp(m_old - m_new)). Reordering a sum of n
terms moves it by about u * sqrt(n) * max|term| (random-walk rounding; n * u in the worst
case), so outputs agree to ~ eps * sqrt(S) * max|v|. A gradient is a longer sum: the
parameter gradients add every token's and head's contribution, n = B * T * H terms, each
carrying the output's relative error. The tests allow ``MARGIN`` times eps * sqrt(n) * max|x|
of each compared array x. Measured (printed by -s): at most 0.15 of that unit for outputs and
0.23 for gradients, so ``MARGIN = 2`` leaves a factor ~9, while a wrong mask or a missing
rescale moves results by > 1e-3, about 1000 units.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.attention_choice import FLASH_MIN_SEQ_LEN, resolve_attention
from theseus.models.errors import ModelError
from theseus.models.layers.attention import Attention, MaskInfo
from theseus.models.layers.cudnn_attention import cudnn_attention
from theseus.models.layers.flash import flash_attention
from theseus.models.layers.rope import RoPE

from tests.models.conftest import HF_MODELS, VOCAB, needs_parity

EPS = float(np.finfo(np.float32).eps)
MARGIN = 2.0
D = 32


def tolerance(want: np.ndarray, terms: int) -> float:
    return MARGIN * EPS * np.sqrt(terms) * float(np.abs(want).max())


def layer(cls=Attention, *, heads=4, kv_heads=4, head_dim=8, window=0, impl="auto", execution=None):
    rope = RoPE(head_dim, 10000.0)
    return cls(
        D,
        heads,
        kv_heads,
        head_dim,
        rope=rope,
        sliding_window=window,
        implementation=impl,
        execution=execution,
        rngs=nnx.Rngs(0),
    )


def mask_info(B: int, T: int, packed: bool) -> MaskInfo:
    """Row 0: two documents and a padded tail (segment 0) when ``packed``; else one document."""
    seg = np.ones((B, T), np.int32)
    if packed:
        seg[0, T // 2 :] = 2
        seg[0, T - T // 5 :] = 0
    slot = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    return MaskInfo(slot, slot, jnp.asarray(seg), jnp.asarray(seg))


def output_and_grads(attention: Attention, x_BxTxD: jax.Array, info: MaskInfo):
    graphdef, state = nnx.split(attention)
    w_BxTxD = jnp.cos(jnp.arange(x_BxTxD.size, dtype=jnp.float32)).reshape(x_BxTxD.shape)

    @jax.jit
    def run(x, state):
        def loss(x, state):
            out, _ = nnx.merge(graphdef, state)(x, info.q_slot, info)
            return jnp.sum(out * w_BxTxD), out  # every output weighted differently

        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(x, state)
        return out, grads

    return run(x_BxTxD, state)


def compare(got, want, terms: dict[str, int], label: str) -> None:
    """``got`` and ``want``: (output, (dx, dparams)); ``terms``: n of each kind of sum."""
    pairs = [("out", got[0], want[0])]
    pairs += [("grad", g, w) for g, w in zip(*map(jax.tree.leaves, (got[1], want[1])), strict=True)]
    worst = dict.fromkeys(terms, 0.0)  # max error in units of eps * sqrt(n) * max|x|
    for kind, g, w in pairs:
        g, w = np.asarray(g), np.asarray(w)
        assert np.isfinite(g).all(), f"{label}: {kind} not finite"
        err, tol = float(np.abs(g - w).max()), tolerance(w, terms[kind])
        assert err <= tol, f"{label}: {kind} max error {err:.2e} > {tol:.2e}"
        worst[kind] = max(worst[kind], err / tol * MARGIN)
    print(
        f"\n{label}: max error / (eps sqrt(n) max|x|): "
        + ", ".join(f"{kind} {value:.2f}" for kind, value in worst.items())
    )


CASES = {  # name: (kv_heads, window, T, packed, flash block)
    "causal": (4, 0, 48, False, 16),
    "window": (4, 11, 48, False, 16),
    "gqa": (2, 0, 48, True, 16),
    "mqa": (1, 0, 48, True, 16),
    "packed-window-gqa": (2, 20, 64, True, 16),
    "odd-length": (2, 0, 37, True, 16),
    "odd-length-window": (1, 9, 37, False, 16),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_flash_equals_reference_outputs_and_gradients(case):
    kv_heads, window, T, packed, block = CASES[case]
    B, H = 2, 4
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    info = mask_info(B, T, packed)
    reference = layer(kv_heads=kv_heads, window=window, impl="reference")
    reference.query_block = 0  # the stages over the whole square: the plainest oracle
    flash = layer(kv_heads=kv_heads, window=window, impl="flash")
    flash.flash_block = block
    assert flash.implementation_for(T) == "flash"
    want = output_and_grads(reference, x, info)
    got = output_and_grads(flash, x, info)
    compare(got, want, {"out": T, "grad": B * T * H}, case)


def test_flash_rows_that_see_nothing_are_zero_with_zero_gradients():
    """Queries whose segment no key has: zeros (not NaN), and no gradient flows through them."""
    B, H, T, K = 1, 2, 20, 8
    q, k, v = (jax.random.normal(jax.random.key(i), (B, H, T, K)) for i in range(3))
    q_seg = jnp.asarray([[1] * 10 + [3] * 10])  # segment 3 has no keys
    k_seg = jnp.asarray([[1] * 10 + [2] * 10])

    def f(q, k, v):
        return flash_attention(q, k, v, q_seg, k_seg, block_q=8, block_k=8)

    out = f(q, k, v)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_array_equal(out[:, :, 10:], 0.0)
    grads = jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2))(q, k, v)
    for g in grads:
        assert np.isfinite(np.asarray(g)).all()
    np.testing.assert_array_equal(grads[0][:, :, 10:], 0.0)  # dq of the unseeing rows
    np.testing.assert_array_equal(grads[1][:, :, 10:], 0.0)  # dk of the unseen keys


@pytest.mark.parametrize(
    "kv_heads, window, T, packed", [(2, 0, 36, True), (1, 7, 36, True), (4, 0, 37, False)]
)
def test_cudnn_call_through_xla_equals_reference(kv_heads, window, T, packed):
    """The cudnn wrapper's layout, mask, window and padding, run by XLA (no GPU here)."""
    B, H, K = 2, 4, 8
    keys = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(keys[0], (B, H, T, K))
    k, v = (jax.random.normal(key, (B, kv_heads, T, K)) for key in keys[1:])
    info = mask_info(B, T, packed)
    ref_layer = layer(heads=H, kv_heads=kv_heads, head_dim=K, window=window)
    want = ref_layer.attend(q, k, v, info)
    got = cudnn_attention(
        q, k, v, info.q_segment, info.k_segment, window=window, implementation="xla"
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance(np.asarray(want), T))


@pytest.mark.parametrize("kv_heads, window", [(2, 0), (1, 50)])
def test_splash_in_the_interpreter_equals_reference(kv_heads, window):
    """The TPU kernel run by the Pallas interpreter: T=200 is padded to two blocks of 128."""
    B, H, K, T = 1, 2, 64, 200
    x = jax.random.normal(jax.random.key(4), (B, T, D))
    info = mask_info(B, T, packed=True)
    reference = layer(heads=H, kv_heads=kv_heads, head_dim=K, window=window, impl="reference")
    reference.query_block = 0
    splash = layer(heads=H, kv_heads=kv_heads, head_dim=K, window=window, impl="splash")
    splash.kernel_interpret = True
    want = output_and_grads(reference, x, info)
    got = output_and_grads(splash, x, info)
    compare(got, want, {"out": T, "grad": B * T * H}, f"splash kv_heads={kv_heads} w={window}")


def test_auto_resolution():
    assert resolve_attention("auto", "cpu", 256) == "reference"
    assert resolve_attention("auto", "cpu", FLASH_MIN_SEQ_LEN) == "flash"
    assert resolve_attention("auto", "cpu", 4096) == "flash"
    assert resolve_attention("auto", "gpu", 4096, dtype="bfloat16", head_dim=64) == "cudnn"
    assert resolve_attention("auto", "gpu", 128, dtype="float16", head_dim=128) == "cudnn"
    # cuDNN needs half precision and a head_dim it supports: otherwise the CPU rule
    assert resolve_attention("auto", "gpu", 4096, dtype="float32", head_dim=64) == "flash"
    assert resolve_attention("auto", "gpu", 4096, dtype="bfloat16", head_dim=12) == "flash"
    # splash compiles on TPUs for every head_dim tried (tests/chips compile it for v5p)
    assert resolve_attention("auto", "tpu", 4096, head_dim=128) == "splash"
    assert resolve_attention("auto", "tpu", 4096, head_dim=64) == "splash"
    assert resolve_attention("auto", "tpu", 128, head_dim=16) == "splash"
    assert resolve_attention("auto", "cuda", 4096, dtype="bfloat16", head_dim=128) == "cudnn"
    # an overridden stage keeps the stages, everywhere
    for backend in ("cpu", "gpu", "tpu"):
        got = resolve_attention("auto", backend, 4096, ("scores",), dtype="bfloat16")
        assert got == "reference"
    assert resolve_attention("flash", "cpu", 8) == "flash"
    assert resolve_attention("reference", "gpu", 8192, ("mask",)) == "reference"
    # the layer asks the same question of the backend it runs on (no mesh in context)
    assert layer().implementation_for(4096) == "flash"
    assert layer().implementation_for(4096, "tpu", "TPU v5", head_shards=2) == "splash"
    assert layer(impl="reference").implementation_for(4096) == "reference"


def test_auto_takes_flash_where_the_tensor_axis_would_split_a_head_group(caplog):
    """Kernels run per shard with the heads split over ``tensor``: heads that do not divide
    it would be computed whole on every shard, so auto falls back, saying why."""
    caplog.set_level("INFO", logger="theseus.models.attention_choice")
    heads = {"n_heads": 8, "n_kv_heads": 2, "head_dim": 128, "dtype": "bfloat16"}
    assert resolve_attention("auto", "tpu", 4096, head_shards=2, **heads) == "splash"
    got = resolve_attention("auto", "tpu", 4096, head_shards=4, device_kind="TPU v5", **heads)
    assert got == "flash"
    assert (
        "flash, not splash on TPU v5: it needs key/value heads (2) that divide the tensor axis (4)"
        in caplog.text
    )
    assert resolve_attention("auto", "gpu", 256, head_shards=4, **heads) == "reference"
    # an explicit kernel is taken at its word (it runs, computing those heads on every shard)
    assert resolve_attention("splash", "tpu", 4096, head_shards=4, **heads) == "splash"


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("cudnn", "cpu", 1024), {}, "model.attention=cudnn needs an NVIDIA GPU (backend is cpu)"),
        (("cudnn", "gpu", 1024), {"dtype": "float32"}, "needs model.dtype=bfloat16 or float16"),
        (("cudnn", "gpu", 1024), {"dtype": "bfloat16", "head_dim": 12}, "multiple of 8"),
        (("cudnn", "gpu", 1024), {"dtype": "bfloat16", "head_dim": 256}, "up to 128 (not 256)"),
        (("splash", "cpu", 1024), {}, "model.attention=splash needs a TPU (backend is cpu)"),
        (("flashy", "cpu", 1024), {}, "model.attention='flashy': use one of auto, reference"),
    ],
)
def test_kernels_that_cannot_run_are_refused_in_one_line(args, kwargs, message):
    with pytest.raises(ModelError) as error:
        resolve_attention(*args, **kwargs)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_explicit_kernel_refused_at_trace_time_names_the_option():
    x = jnp.zeros((1, 8, D))
    info = mask_info(1, 8, packed=False)
    cudnn, splash = layer(impl="cudnn"), layer(impl="splash")  # built anywhere, run on GPU/TPU
    with pytest.raises(ModelError, match=r"cudnn needs an NVIDIA GPU \(backend is cpu\)"):
        cudnn(x, info.q_slot, info)
    with pytest.raises(ModelError, match=r"splash needs a TPU \(backend is cpu\)"):
        splash(x, info.q_slot, info)


class SoftCappedAttention(Attention):
    """Soft-capped scores; the cap is far below random-init scores (~1e-2), so it acts."""

    def scores(self, q, k):
        return 1e-3 * jnp.tanh(super().scores(q, k) / 1e-3)


@pytest.mark.parametrize("impl", ["flash", "cudnn", "splash"])
def test_an_overridden_stage_refuses_an_explicit_kernel(impl):
    with pytest.raises(ModelError) as error:
        layer(SoftCappedAttention, impl=impl)
    text = str(error.value)
    assert f"model.attention={impl}: SoftCappedAttention overrides Attention.scores" in text
    assert "use model.attention=reference" in text


def test_an_overridden_stage_runs_under_auto():
    capped = layer(SoftCappedAttention)
    assert capped.implementation_for(4096) == "reference"
    T = FLASH_MIN_SEQ_LEN  # long enough for auto to pick flash, were scores not overridden
    info = mask_info(1, T, packed=False)
    x = jax.random.normal(jax.random.key(5), (1, T, D))
    capped.query_block = 0
    out, _ = capped(x, info.q_slot, info)
    plain = layer()
    nnx.update(plain, nnx.state(capped))
    base, _ = plain(x, info.q_slot, info)  # flash, without the cap
    assert np.abs(np.asarray(out) - np.asarray(base)).max() > 1e-6  # the cap did act
    q, k, v = capped.project_qkv(x)
    q, k = capped.apply_positions(q, k, info.q_slot)
    want = capped.attend(*(z.transpose(0, 2, 1, 3) for z in (q, k, v)), info)
    np.testing.assert_allclose(out, capped.output(want.transpose(0, 2, 1, 3)), atol=1e-6)


def temp_bytes(impl: str, T: int) -> int:
    """Scratch memory XLA plans for one attention layer's forward + backward at length T."""
    attention = layer(heads=2, kv_heads=2, head_dim=16, impl=impl)
    attention.query_block = 0  # reference over the whole square (flash ignores it)
    graphdef, state = nnx.split(attention)
    info = mask_info(1, T, packed=True)

    def loss(x, state):
        return jnp.sum(nnx.merge(graphdef, state)(x, info.q_slot, info)[0] ** 2)

    x = jax.ShapeDtypeStruct((1, T, D), jnp.float32)
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(x, state).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_flash_memory_grows_linearly_reference_quadratically():
    sizes = {
        (impl, T): temp_bytes(impl, T) for impl in ("flash", "reference") for T in (1024, 4096)
    }
    flash = sizes["flash", 4096] / sizes["flash", 1024]
    reference = sizes["reference", 4096] / sizes["reference", 1024]
    print(f"\ntemp bytes {sizes}; T=4096 / T=1024: flash {flash:.2f}, reference {reference:.2f}")
    assert flash <= 4.6  # 4x the tokens: linear
    assert reference >= 10.0  # quadratic would be 16


@pytest.mark.parity
@needs_parity
@pytest.mark.parametrize("name", ["gpt2", "llama-gqa2", "llama3-mqa-tied", "qwen3"])
def test_flash_matches_hf(name, hf_checkpoint, monkeypatch):
    """Imported models with flash forced on every layer (blocks of 4: several per row)."""
    import torch
    import transformers
    from theseus.models.hf import load_hf

    assert name in HF_MODELS
    directory = hf_checkpoint(name)
    model = load_hf(directory)
    monkeypatch.setattr(Attention, "flash_block", 4)
    layers = [m for _, m in nnx.iter_modules(model) if isinstance(m, Attention)]
    assert layers
    for attention in layers:
        attention.implementation = "flash"
    rng = np.random.RandomState(0)
    tokens = rng.randint(3, VOCAB, (3, 13))
    mask = np.ones_like(tokens)
    mask[1, 8:] = 0  # right padding: segment 0
    with torch.no_grad():
        hf = transformers.AutoModelForCausalLM.from_pretrained(directory)
        want = hf(torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits.numpy()
    got = np.asarray(model(jnp.asarray(tokens), segment_ids=jnp.asarray(mask)))
    assert np.abs(got - want)[mask == 1].max() < 1e-4  # the parity tests' tolerance


def test_the_model_option_reaches_every_layer_and_an_override_refuses_a_kernel():
    from theseus.models.llama.model import Llama

    from tests.models.conftest import tiny

    class CappedLlama(Llama):
        attention_cls = SoftCappedAttention

    model = tiny("llama", attention="flash")
    layers = [m for _, m in nnx.iter_modules(model) if isinstance(m, Attention)]
    assert layers and all(a.implementation == "flash" for a in layers)
    with pytest.raises(ModelError) as error:
        CappedLlama(model.config, rngs=nnx.Rngs(params=0))
    assert str(error.value) == (
        "model.attention=flash: SoftCappedAttention overrides Attention.scores; "
        "use model.attention=reference (or auto)"
    )
