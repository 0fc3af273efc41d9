"""Gemma 3, Mistral, Mixtral and DeepSeek-V3 beyond the shared parity tests.

``test_models_parity.py`` compares their imported logits with transformers (1e-4, see its
docstring) and checks the export; here: greedy generation against ``generate``, that every
feature the tiny checkpoints turn on matters (so that agreement is evidence), KV-cache
decoding (MLA's latent cache), group-limited routing, the balancing bias, the routed FLOPs,
LoRA targets, the published sizes and the refusals.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests.models.conftest import VOCAB, needs_parity, tiny
from tests.models.test_models_parity import assert_greedy_matches_hf, batch, hf_forward

FAMILIES = ["mistral", "mixtral", "gemma3", "deepseek_v3"]
CHECKPOINTS = [*FAMILIES, "deepseek_v3-moonlight"]  # conftest.HF_MODELS names


@pytest.fixture(scope="module")
def hf_logits(hf_checkpoint) -> Any:
    """``hf_logits(name) -> (directory, logits)``: transformers' logits on ``batch()``, once."""
    done: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in done:
            directory = hf_checkpoint(name)
            tokens, mask = batch()
            done[name] = directory, hf_forward(directory, tokens, mask).logits.numpy()
        return done[name]

    return get


def forward(model: Any, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Eager (op by op): cheaper than compiling each variant once."""
    return np.asarray(model(jnp.asarray(tokens), segment_ids=jnp.asarray(mask)))


# ---------------------------------------------------------------- against transformers

# (checkpoint, what turns a feature off): each must move the logits far from transformers'
ABLATIONS = [
    ("mistral", {"sliding_window": 0}),
    ("mixtral", {"sliding_window": 0}),
    ("gemma3", {"sliding_window": 0}),
    ("gemma3", {"global_every": 1}),
    ("gemma3", {"local_rope_theta": 10000.0}),
    ("gemma3", {"rope_scaling": "none"}),
    ("gemma3", {"query_pre_attn_scalar": 0}),
    ("gemma3", {"final_logit_softcap": 0.0}),
    ("deepseek_v3", {"n_groups": 1, "top_groups": 1}),
    ("deepseek_v3", {"routed_scale": 1.0}),
    ("deepseek_v3", {"rope_scaling": "none"}),
    ("deepseek_v3", {"rope_interleave": False}),
    ("deepseek_v3", {"router_bias": 0.0}),  # the balancing bias zeroed
    ("deepseek_v3-moonlight", {"n_shared_experts": 0}),
]


@pytest.mark.parity
@needs_parity
@pytest.mark.parametrize(("name", "off"), ABLATIONS, ids=lambda v: str(v))
def test_each_feature_of_the_parity_checkpoints_matters(name, off, hf_logits):
    """The imported model agrees with transformers to 1e-4; the same weights with one
    feature turned off disagree by far more (> 1e-3): the parity test exercises it."""
    from theseus.models.hf import load_hf, params_from_hf, read_tensors

    directory, ref = hf_logits(name)
    tokens, mask = batch()
    model = load_hf(directory)
    tensors = read_tensors(directory)
    config = model.config
    if "router_bias" in off:
        tensors = {k: v * 0 if "e_score" in k else v for k, v in tensors.items()}
    else:
        config = dataclasses.replace(config, **off)
        if "n_shared_experts" in off:
            tensors = {k: v for k, v in tensors.items() if "shared_experts" not in k}
    real = mask == 1
    ablated = forward(params_from_hf(model.family, config, tensors), tokens, mask)
    print(
        f"\n{name} {off}: max |logit| {np.abs(ref[real]).max():.2f}, ablated off by "
        f"{np.abs(ablated - ref)[real].max():.2e}"
    )
    assert np.abs(ablated - ref)[real].max() > 1e-3


@pytest.mark.parity
@needs_parity
@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_generation_matches_hf_for_20_tokens(name, hf_checkpoint):
    """Left-padded prompts of different lengths; 20 new tokens cross every window. (The
    Moonlight-like checkpoint differs only in its query path, which its logits test covers.)"""
    assert_greedy_matches_hf(hf_checkpoint(name), 20)


@pytest.mark.parity
@needs_parity
def test_mixtral_load_balancing_loss_matches_hf(hf_checkpoint):
    from theseus.models.hf import load_hf

    directory = hf_checkpoint("mixtral")
    # no padding (transformers masks the aux loss with attention_mask too), and no token 0:
    # its embedding is zero in transformers, and a window of them routes in an exact tie
    tokens = np.random.RandomState(0).randint(3, VOCAB, (3, 12))
    mask = np.ones_like(tokens)
    ref = hf_forward(directory, tokens, mask, output_router_logits=True)
    model = load_hf(directory)
    _, aux = model.forward_with_aux(jnp.asarray(tokens))
    expected = model.config.router_aux_loss_coef * float(ref.aux_loss)
    assert float(aux["moe_load_balance"]) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------- the KV cache


@pytest.mark.parametrize("family", ["mistral", "gemma3", "deepseek_v3"])
def test_prefill_then_decode_reproduces_the_full_forward(family):
    """The same attention, computed one query at a time against the cache: float32 sums in
    another order, so agreement to 1e-5 (|logit| < 1, 12 tokens through 2-3 blocks).
    Mixtral's cache is Mistral's (its greedy generation is checked against transformers)."""
    model = tiny(family)
    x = jnp.asarray(np.random.RandomState(0).randint(1, VOCAB, (2, 12)))
    full = model(x)
    cache = model.init_cache(2, 16)
    ones, pos = jnp.ones((2, 12), jnp.int32), jnp.broadcast_to(jnp.arange(12), (2, 12))
    graphdef, state = nnx.split(model)

    @jax.jit
    def decode(state, cache, x, pos, seg):
        return nnx.merge(graphdef, state).decode(x, cache, positions=pos, segment_ids=seg)

    logits, cache = decode(state, cache, x[:, :5], pos[:, :5], ones[:, :5])
    steps = [logits]
    for t in range(5, 12):  # past the tiny presets' 8-token windows
        step, cache = decode(state, cache, x[:, t : t + 1], pos[:, t : t + 1], ones[:, t : t + 1])
        steps.append(step)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)
    assert int(cache.index) == 12
    if family == "deepseek_v3":  # the latent and the shared rotary key, not K and V per head
        c = model.config
        # the cache's lane-dense layout: layers x rows x slots x (groups x width), one group
        assert cache.k.shape == (c.n_layers, 2, 16, c.kv_lora_rank)
        assert cache.v.shape == (c.n_layers, 2, 16, c.qk_rope_dim)


def test_mla_kernels_see_padded_heads_and_match_the_reference():
    """flash needs one head width: q/k (24) and v (12) are zero-padded, which adds zero terms
    to every score and output (the same float32 sums up to order: 1e-5)."""
    x = jax.random.randint(jax.random.key(1), (2, 20), 1, VOCAB)
    reference = tiny("deepseek_v3", attention="reference")
    flash = tiny("deepseek_v3", attention="flash")
    for block in flash.blocks:
        block.attention.flash_block = 8  # several blocks over 20 tokens
    assert flash.choose_attention(20, "cpu").label() == "flash"
    assert all(layer.kernel.name == "flash" for layer in flash.attention_layers())
    np.testing.assert_allclose(flash(x), reference(x), atol=1e-5)


@pytest.mark.parametrize("kernel", ["flash", "cudnn", "splash"])
def test_every_kernel_takes_the_attention_scale(kernel):
    """Gemma 3's 1/sqrt(query_pre_attn_scalar) and MLA's YaRN-tempered scale reach the
    kernels: scale 0.3 (not 1/sqrt(64)), a 7-token window, against the reference stages.
    The same float32 sums reordered: 1e-5 at |output| ~ 1."""
    from theseus.models.layers import Attention
    from theseus.models.layers.attention import MaskInfo
    from theseus.models.layers.cudnn_attention import cudnn_attention
    from theseus.models.layers.flash import flash_attention
    from theseus.models.layers.splash_attention import splash_attention

    B, H, G, T, K = 1, 2, 1, 40, 64
    keys = jax.random.split(jax.random.key(5), 3)
    q = jax.random.normal(keys[0], (B, H, T, K))
    k, v = (jax.random.normal(key, (B, G, T, K)) for key in keys[1:])
    segments = jnp.ones((B, T), jnp.int32)
    slots = jnp.broadcast_to(jnp.arange(T), (B, T))
    reference = Attention(32, H, G, K, sliding_window=7, scale=0.3, rngs=nnx.Rngs(0))
    want = reference.attend(q, k, v, MaskInfo(slots, slots, segments, segments))
    kw = dict(window=7, scale=0.3)
    if kernel == "flash":
        got = flash_attention(q, k, v, segments, segments, block_q=16, block_k=16, **kw)
    elif kernel == "cudnn":  # its layout and masks, run by XLA (no GPU here)
        got = cudnn_attention(q, k, v, segments, segments, implementation="xla", **kw)
    else:
        got = splash_attention(q, k, v, segments, segments, interpret=True, **kw)
    np.testing.assert_allclose(got, want, atol=1e-5)
    unscaled = reference.attend(
        q * (K**-0.5 / 0.3), k, v, MaskInfo(slots, slots, segments, segments)
    )
    assert np.abs(np.asarray(unscaled) - np.asarray(want)).max() > 1e-2  # the scale mattered


# ---------------------------------------------------------------- routing


def test_group_limited_routing_picks_only_from_the_best_groups():
    from theseus.models.layers.moe import group_limited_top_k

    rng = np.random.RandomState(0)
    scores = rng.rand(64, 12).astype(np.float32)  # 4 groups of 3 experts, 2 searched, top-3
    chosen = np.asarray(group_limited_top_k(jnp.asarray(scores), 3, n_groups=4, top_groups=2))
    for row, picked in zip(scores, chosen, strict=True):
        groups = row.reshape(4, 3)
        rating = np.sort(groups, axis=1)[:, -2:].sum(1)  # each group's two best
        best = np.argsort(-rating)[:2]
        allowed = np.concatenate([np.arange(3 * g, 3 * g + 3) for g in best])
        expected = allowed[np.argsort(-row[allowed])[:3]]
        assert sorted(picked) == sorted(expected)
    plain = np.asarray(group_limited_top_k(jnp.asarray(scores), 3))
    assert (np.sort(plain, 1) == np.sort(np.argsort(-scores, 1)[:, :3], 1)).all()
    assert (np.sort(plain, 1) != np.sort(chosen, 1)).any()  # the limit changed some choices


def routing_stats(model: Any, tokens_BxT: jax.Array) -> dict[str, jax.Array]:
    """The blocks' statistics (``counts`` LxE, ...) of one document per row."""
    from theseus.models.layers.attention import MaskInfo

    slots_BxT = jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1]), tokens_BxT.shape)
    segments_BxT = jnp.ones_like(tokens_BxT)
    info = MaskInfo(slots_BxT, slots_BxT, segments_BxT, segments_BxT)
    x_BxTxD = model.embed_tokens(tokens_BxT, slots_BxT)
    return model.run_blocks(x_BxTxD, slots_BxT, info, None)[2]


def test_balancing_bias_moves_against_the_load_in_a_train_step():
    """One step of the train step with AdamW: each MoE layer's bias moves by exactly
    -rate * sign(load_e - 1/E), the loads of that batch; the aux entry is zero."""
    from theseus.core.optim.balance import BalanceBias, with_balance_biases
    from theseus.core.train.state import TrainState
    from theseus.core.train.step import make_train_step

    model = tiny("deepseek_v3", bias_update_rate=0.01)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tokens = np.random.RandomState(0).randint(1, VOCAB, (4, 17)).astype(np.int32)
    data = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": np.broadcast_to(np.arange(16, dtype=np.int32), (4, 16)),
        "segment_ids": np.ones((4, 16), np.int32),
        "loss_mask": np.ones((4, 16), np.float32),
    }
    stats = routing_stats(model, jnp.asarray(data["inputs"]))
    optimizer = with_balance_biases(optax.adamw(1e-2, weight_decay=0.1))
    state = TrainState.fresh(params, optimizer)
    step = jax.jit(make_train_step(graphdef, rest, optimizer, lambda s: 1e-2, 1, False))
    state, metrics = step(state, {k: jnp.asarray(v) for k, v in data.items()})
    assert float(metrics["model"]["moe_bias_balance"]) == 0.0  # zero in value
    after = dict(nnx.to_flat_state(state.params))
    moved, layers = 0, []
    for path, variable in nnx.to_flat_state(params):
        if isinstance(variable, BalanceBias):
            counts = np.asarray(stats["counts"][path[1]])
            expected = -0.01 * np.sign(counts / counts.sum() - 1 / counts.size)
            change = np.asarray(after[path][...]) - np.asarray(variable[...])
            np.testing.assert_allclose(change, expected, atol=1e-7)  # 1e-7: f32 ulps of 0.01
            moved += int((expected != 0).sum())
            layers.append(path[1])
    assert moved and min(layers) >= model.config.first_dense_layers


def test_the_optimizer_never_sees_the_balancing_bias():
    """``with_balance_biases(adamw)``: the other leaves get AdamW's update exactly (clipping
    and moments computed without the bias), the bias the sign rule."""
    from theseus.core.optim.balance import BalanceBias, with_balance_biases

    meta = dict(out_sharding=None, eager_sharding=False)
    params = nnx.State(
        {
            "w": nnx.Param(jnp.ones((3, 2)), **meta),
            "b": BalanceBias(jnp.zeros((4,)), update_rate=0.5, **meta),
        }
    )
    grads = nnx.State(
        {
            "w": nnx.Param(jnp.arange(6.0).reshape(3, 2), **meta),
            "b": BalanceBias(jnp.array([1e-6, -2e-6, 0.0, 3e-6]), update_rate=0.5, **meta),
        }
    )
    inner = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.1, weight_decay=0.1))
    updates, _ = with_balance_biases(inner).update(
        grads, with_balance_biases(inner).init(params), params
    )
    alone, _ = inner.update(
        nnx.State({"w": grads["w"]}),
        inner.init(nnx.State({"w": params["w"]})),
        nnx.State({"w": params["w"]}),
    )
    # the same arithmetic in two traces: equal up to an ulp of the 0.11 update
    np.testing.assert_allclose(updates["w"][...], alone["w"][...], rtol=1e-6)
    np.testing.assert_array_equal(updates["b"][...], [-0.5, 0.5, 0.0, -0.5])


def test_the_loss_does_not_differentiate_the_bias():
    """The bias only chooses experts (top-k indices, no derivative); the ``balance``
    statistic's gradient on it is the carried load, ``LOAD_CARRIER * (load_e - 1/E)``."""
    from theseus.models.layers.moe import LOAD_CARRIER, SigmoidMoE

    layer = SigmoidMoE(16, 8, 8, 2, n_groups=4, top_groups=2, rngs=nnx.Rngs(0))
    layer.router_bias[...] = jnp.linspace(-0.2, 0.2, 8)
    x = jax.random.normal(jax.random.key(0), (2, 12, 16))
    graphdef, state = nnx.split(layer)

    def outputs(state: nnx.State) -> tuple[jax.Array, dict]:
        return nnx.merge(graphdef, state).forward_with_stats(x)

    grad_out = jax.jit(jax.grad(lambda s: jnp.sum(outputs(s)[0] ** 2)))(state)
    grad_balance = jax.jit(jax.grad(lambda s: outputs(s)[1]["balance"]))(state)
    counts = np.asarray(jax.jit(outputs)(state)[1]["counts"])
    assert not np.asarray(grad_out["router_bias"][...]).any()
    assert np.asarray(grad_out["router"]["kernel"][...]).any()  # the scores' weights learn
    expected = LOAD_CARRIER * (counts / counts.sum() - 1 / 8)
    np.testing.assert_allclose(grad_balance["router_bias"][...], expected, rtol=1e-6)


@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3"])
def test_tiny_train_step_compiles_to_the_routed_flops(family):
    """Compiled FLOPs of forward + backward over ``flops_per_token``: the routed experts
    counted at k / E, MLA's projections and shared experts in full. 0.8-1.3 leaves room for
    the elementwise work and the tiles' padding (at most 1/8 of the routed rows); running
    every expert would add (E - k) / k of the expert FLOPs, beyond the bound."""
    from tests.models.test_moe_routed import flops

    B, T = 2, 32
    model = tiny(family, n_experts=16, n_experts_per_token=2)
    tokens_BxT = jax.random.randint(jax.random.key(0), (B, T), 1, VOCAB)
    graphdef, params = nnx.split(model.unrolled())

    def loss(params: nnx.State, tokens_BxT: jax.Array) -> jax.Array:
        logits, aux = nnx.merge(graphdef, params).forward_with_aux(tokens_BxT)
        return jnp.mean(logits) + sum(aux.values())

    step = jax.jit(jax.grad(loss)).lower(params, tokens_BxT).compile()
    analytic = model.flops_per_token(T) * B * T
    every_expert = analytic + 6 * B * T * sum(
        float(v[...].size) * (1 - 2 / 16)
        for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        if path[-1] in ("w_gate", "w_up", "w_down")
    )
    assert 0.8 <= flops(step) / analytic <= 1.3, (flops(step), analytic)
    assert every_expert / analytic > 1.3  # the bound tells routed from dense


# ---------------------------------------------------------------- LoRA, sizes, refusals


@pytest.mark.parametrize("family", ["gemma3", "deepseek_v3"])
def test_lora_adapts_every_projection_but_the_routed_experts(family):
    from theseus.core.adapters import Adapter
    from theseus.core.train.configs import LoRAConfig
    from theseus.models.families import family_named
    from theseus.models.layers.lora import adapted_class

    base = tiny(family)
    lora = LoRAConfig(rank=2, alpha=4.0, targets=["attention", "mlp"])
    cls = adapted_class(family_named(family).load_model(), lora)
    adapted = cls(base.config, rngs=nnx.Rngs(params=0))
    paths = {".".join(map(str, p[:-1])) for p, _ in nnx.to_flat_state(nnx.state(adapted, Adapter))}
    layer = f"blocks.{len(adapted.blocks) - 1}"
    if family == "deepseek_v3":
        for name in ("q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj"):
            assert f"{layer}.attention.{name}" in paths
        assert f"{layer}.mlp.shared_expert.gate_proj" in paths
        assert not any("router" in p or "w_gate" in p for p in paths)
    else:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert f"{layer}.attention.{name}" in paths
        assert f"{layer}.mlp.gate_proj" in paths
    nnx.update(adapted, nnx.state(base, nnx.Param))  # B = 0: the base model's outputs
    x = jnp.arange(10)[None] % VOCAB
    np.testing.assert_allclose(adapted(x), base(x), atol=1e-6)


# (family, preset, vocabulary of the published checkpoint, its parameter count)
PUBLISHED = [
    ("mistral", "7b", 32000, 7_241_732_096),  # Mistral-7B-v0.1
    ("mixtral", "8x7b", 32000, 46_702_792_704),  # Mixtral-8x7B-v0.1
    ("gemma3", "1b", 262144, 999_885_952),  # gemma-3-1b-pt
    ("deepseek_v3", "moonlight-16b-a3b", 163840, 15_960_110_208),  # Moonlight-16B-A3B
]


@pytest.mark.parametrize(("family", "preset", "vocab", "count"), PUBLISHED)
def test_presets_have_the_published_sizes(family, preset, vocab, count):
    """Shapes only (``nnx.eval_shape``): the preset builds the published architecture."""
    from theseus.models.families import family_named

    spec = family_named(family)
    config = spec.config(preset=preset, **{**spec.presets[preset], "vocab_size": vocab})
    model = nnx.eval_shape(lambda: spec.load_model()(config, rngs=nnx.Rngs(params=0)))
    params = nnx.to_flat_state(nnx.state(model, nnx.Param))
    assert sum(math.prod(v.shape) for _, v in params) == count


def refusals() -> list[tuple[str, Any, str]]:
    from theseus.models.deepseek_v3 import hf as deepseek_hf
    from theseus.models.gemma3 import hf as gemma_hf
    from theseus.models.layers.moe import SigmoidMoE
    from theseus.models.mixtral import hf as mixtral_hf

    gemma = {
        "vocab_size": VOCAB,
        "max_position_embeddings": 64,
        "num_hidden_layers": 3,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 48,
        "rms_norm_eps": 1e-6,
    }
    deepseek = {"hidden_act": "silu", "attention_bias": False}
    moe = dict(rngs=nnx.Rngs(0))

    def gemma_from(changed: dict[str, Any]) -> Callable[[], Any]:
        """Reading a Gemma 3 config.json with ``changed`` keys."""
        return lambda: gemma_hf.config_from_hf({**gemma, **changed})

    def deepseek_from(changed: dict[str, Any]) -> Callable[[], Any]:
        """Reading a DeepSeek-V3 config.json with ``changed`` keys."""
        return lambda: deepseek_hf.config_from_hf({**deepseek, **changed})

    return [
        ("groups", lambda: SigmoidMoE(8, 4, 6, 2, n_groups=4, **moe), "groups must divide"),
        ("group room", lambda: SigmoidMoE(8, 4, 8, 3, n_groups=4, **moe), "fewer than the 3"),
        ("gemma scaling", lambda: tiny("gemma3", rope_scaling="llama3"), "one of none, linear$"),
        ("gemma period", lambda: tiny("gemma3", global_every=0), "global_every=0"),
        ("gemma act", gemma_from({"hidden_activation": "relu"}), "hidden_activation='relu'"),
        (
            "gemma bidirectional",
            gemma_from({"use_bidirectional_attention": True}),
            "use_bidirectional_attention",
        ),
        (
            "gemma layers",
            gemma_from({"layer_types": ["full_attention", "sliding_attention"] * 2}),
            "repeating run",
        ),
        (
            "gemma rope",
            gemma_from({"rope_parameters": {"full_attention": {"rope_type": "yarn"}}}),
            "rope types",
        ),
        ("deepseek scaling", lambda: tiny("deepseek_v3", rope_scaling="ntk"), "one of none, yarn$"),
        ("deepseek rope", lambda: tiny("deepseek_v3", qk_rope_dim=7), "even width"),
        ("deepseek grouping", lambda: tiny("deepseek_v3", moe_grouping="x"), "moe_grouping"),
        ("deepseek act", deepseek_from({"hidden_act": "gelu"}), "hidden_act='gelu'"),
        ("deepseek bias", deepseek_from({"attention_bias": True}), "attention_bias=True"),
        (
            "deepseek rope type",
            lambda: deepseek_hf.rope_from_hf({"rope_parameters": {"rope_type": "dynamic"}}),
            "supported: default, yarn",
        ),
        (
            "mixtral shared",
            lambda: mixtral_hf.config_to_hf(tiny("mixtral", shared_expert_d_ff=8).config),
            "no MixtralForCausalLM equivalent",
        ),
    ]


@pytest.mark.parametrize("case", refusals(), ids=lambda case: case[0])
def test_what_the_families_cannot_build_is_refused_in_one_line(case):
    from theseus.core.errors import TheseusError

    _, make, match = case
    with pytest.raises(TheseusError, match=match) as error:
        make()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_config_json_round_trip_gives_the_same_config(family):
    """``config_to_hf`` then ``config_from_hf`` (what export then ``init.hf`` do) rebuilds
    every field config.json decides; ``model_values`` is what ``init.hf`` fills."""
    from theseus.models.hf.checkpoint import config_from_hf, config_to_hf, model_values

    # 0 (derived) spelled out, as config.json spells it: head_dim 64 / 4 heads, Gemma's
    # query_pre_attn_scalar its head_dim
    explicit = {"mistral": {"head_dim": 16}, "mixtral": {"head_dim": 16}}
    explicit["gemma3"] = {"query_pre_attn_scalar": 16}
    config = tiny(family, **explicit.get(family, {})).config
    name, again = config_from_hf(config_to_hf(family, config))
    assert name == family
    values = model_values(family, config_to_hf(family, config))
    assert values == {k: getattr(config, k) for k in values}
    assert dataclasses.replace(again, preset=config.preset) == config
