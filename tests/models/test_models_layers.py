"""Layers and model behaviour that need no transformers: masks, axes, MoE, precision, FLOPs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.models.conftest import VOCAB, tiny

FAMILIES = ["gpt", "llama", "qwen2", "qwen3", "qwen3_moe"]
AXES = {"vocab", "embed", "mlp", "heads", "kv_heads", "head_dim", "experts", "layers", None}


def tokens(batch: int = 2, length: int = 16, seed: int = 0) -> jax.Array:
    return jax.random.randint(jax.random.key(seed), (batch, length), 1, VOCAB)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_has_logical_axis_names(family):
    model = tiny(family)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        axes = var.get_metadata().get("out_sharding")
        assert axes is not None and len(axes) == var[...].ndim, path
        assert set(axes) <= AXES, (path, axes)
        assert var[...].dtype == jnp.float32, path
        # the blocks' parameters are stacked: a leading layer axis, and only theirs
        stacked = path[0] == "blocks"
        assert (axes[0] == "layers") == stacked and axes.count("layers") <= 1, (path, axes)
        assert not stacked or var[...].shape[0] == model.config.n_layers, path


@pytest.mark.parametrize("family", ["gpt", "llama", "qwen3_moe"])
def test_packed_documents_equal_separate_runs(family):
    model = tiny(family)
    a, b = tokens(1, 9, seed=1), tokens(1, 7, seed=2)
    packed = jnp.concatenate([a, b], axis=1)
    segments = jnp.array([[1] * 9 + [2] * 7])
    logits = model(packed, segment_ids=segments)  # positions restart per document
    np.testing.assert_allclose(logits[:, :9], model(a), atol=1e-5)
    np.testing.assert_allclose(logits[:, 9:], model(b), atol=1e-5)


@pytest.mark.parametrize("family", ["gpt", "qwen2"])
def test_right_padding_does_not_change_real_tokens(family):
    model = tiny(family)
    x = tokens(1, 10)
    padded = jnp.concatenate([x, jnp.zeros((1, 6), jnp.int32)], axis=1)
    segments = jnp.array([[1] * 10 + [0] * 6])
    np.testing.assert_allclose(model(padded, segment_ids=segments)[:, :10], model(x), atol=1e-5)


def test_sliding_window_limits_what_a_token_sees():
    model = tiny("llama", n_layers=1, sliding_window=3)
    x = tokens(1, 12)
    changed = x.at[0, 0].set((x[0, 0] + 1) % VOCAB)
    before, after = model(x), model(changed)
    assert np.abs(before[0, :3] - after[0, :3]).max() > 1e-4  # inside the window
    np.testing.assert_allclose(before[0, 3:], after[0, 3:], atol=1e-6)  # outside it
    wide = tiny("llama", n_layers=1, sliding_window=64)
    np.testing.assert_allclose(wide(x), tiny("llama", n_layers=1)(x), atol=1e-6)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_mha_gqa_mqa(kv_heads):
    model = tiny("llama", n_kv_heads=kv_heads)
    assert model.layer(0).attention.k_proj.kernel[...].shape == (64, kv_heads, 16)
    assert model(tokens()).shape == (2, 16, VOCAB)


def test_heads_not_a_multiple_of_kv_heads_is_refused():
    from theseus.core.errors import ConfigError
    from theseus.models.errors import ModelError
    from theseus.models.layers.attention import Attention

    with pytest.raises(ConfigError, match="model.n_kv_heads=3 must divide model.n_heads=4"):
        tiny("llama", n_kv_heads=3)  # the config refuses it
    with pytest.raises(ModelError, match="n_heads=4 is not a multiple of n_kv_heads=3"):
        Attention(64, 4, 3, 16, rngs=nnx.Rngs(0))  # and so does the layer, built directly


def test_moe_capacity_drops_and_dropless_path():
    x = tokens(2, 16)
    dropless = tiny("qwen3_moe")
    roomy = tiny("qwen3_moe", capacity_factor=4.0)  # capacity >= all tokens: nothing dropped
    tight = tiny("qwen3_moe", capacity_factor=0.25)
    base_logits, _, stats, _ = dropless.forward_with_stats(x)
    roomy_logits, _, roomy_stats, _ = roomy.forward_with_stats(x)
    np.testing.assert_allclose(roomy_logits, base_logits, atol=1e-5)
    assert float(stats["moe_drop_fraction"]) == 0.0 == float(roomy_stats["moe_drop_fraction"])
    _, _, tight_stats, _ = tight.forward_with_stats(x)
    assert 0.5 < float(tight_stats["moe_drop_fraction"]) < 1.0  # capacity 1/4 of the load


def test_moe_aux_loss_and_shared_expert():
    x = tokens()
    model = tiny("qwen3_moe")
    _, aux = model.forward_with_aux(x)
    # E * sum f_e P_e >= 1 * k-ish; perfectly balanced routing gives exactly k
    loss = float(aux["moe_load_balance"]) / model.config.router_aux_loss_coef
    assert 1.0 < loss < model.config.n_experts_per_token * model.config.n_experts
    assert tiny("llama")(x) is not None and tiny("llama").forward_with_aux(x)[1] == {}
    shared = tiny("qwen3_moe", shared_expert_d_ff=32)
    assert shared.layer(0).mlp.shared_expert is not None
    assert np.abs(shared(x) - model(x)).max() > 1e-6


def test_bf16_compute_keeps_f32_params_and_logits():
    x = tokens()
    f32 = tiny("llama")
    bf16 = tiny("llama", dtype="bfloat16")
    assert bf16.layer(0).attention.q_proj.kernel[...].dtype == jnp.float32
    out = bf16(x)
    assert out.dtype == jnp.float32
    assert np.abs(out - f32(x)).max() < 5e-2  # bf16 has 8 bits of mantissa


def test_flops_per_token_convention():
    model = tiny("gpt")  # 2 layers, d 64, 4 heads, d_ff 256, vocab 97, tied
    d, L, T, V = 64, 2, 32, VOCAB
    matmul_params = L * (4 * d * d + 2 * d * 4 * d) + V * d  # wpe lookup excluded, head counted
    attention = L * 2 * 2 * d * (T + 1) / 2  # QK^T and PV over the (T+1)/2 keys seen on average
    assert model.flops_per_token(T) == pytest.approx(6 * matmul_params + 3 * attention)
    moe = tiny("qwen3_moe")
    dense_like = tiny("qwen3_moe", n_experts_per_token=4)
    assert moe.flops_per_token(T) < dense_like.flops_per_token(T)  # only k experts are active


def test_trainer_contract_split_merge_and_differentiate():
    model = tiny("gpt")
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(params, x):
        logits = nnx.merge(graphdef, params)(x[:, :-1])
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, x[:, 1:, None], axis=-1).mean()

    step = jax.jit(lambda p, x: jax.value_and_grad(loss)(p, x))
    value, grads = step(params, tokens())
    assert np.isfinite(float(value)) and abs(float(value) - np.log(VOCAB)) < 0.5
    assert jax.tree.structure(grads) == jax.tree.structure(params)
    hash(graphdef)  # usable as a static jit argument


def test_models_take_their_typed_config_as_given():
    import dataclasses

    from theseus.models.errors import ModelError
    from theseus.models.gpt.config import GPTConfig
    from theseus.models.gpt.model import GPT
    from theseus.models.llama.config import LlamaConfig

    # the config tree hands a model a subclass of its config with a `name` field
    named = dataclasses.make_dataclass(
        "ModelGPTConfig",
        [("name", str, dataclasses.field(default="gpt"))],
        bases=(GPTConfig,),
        unsafe_hash=True,
    )
    config = named(vocab_size=VOCAB, n_layers=1, d_model=32, n_heads=2)
    before = dataclasses.asdict(config)
    model = GPT(config, rngs=nnx.Rngs(params=0))
    assert model.config is config and dataclasses.asdict(config) == before  # kept, unchanged
    assert model(tokens(1, 4)).shape == (1, 4, VOCAB)
    hash(nnx.graphdef(model))
    with pytest.raises(ModelError, match="GPT is built from a GPTConfig .* not a dict"):
        GPT({"vocab_size": VOCAB}, rngs=nnx.Rngs(params=0))
    with pytest.raises(ModelError, match="not a LlamaConfig"):
        GPT(LlamaConfig(vocab_size=VOCAB), rngs=nnx.Rngs(params=0))


def test_bad_inputs_name_the_values():
    from theseus.models.errors import ModelError, SequenceTooLongError, VocabMismatchError

    model = tiny("gpt")
    with pytest.raises(SequenceTooLongError, match="65 tokens.*max_seq_len=64"):
        model(jnp.zeros((1, 65), jnp.int32))
    with pytest.raises(ModelError, match="vocab_size=0"):
        tiny("llama", vocab_size=0)
    with pytest.raises(VocabMismatchError, match="tokenizer has 100 tokens.*vocab_size=97"):
        model.check_vocab(100)
    model.check_vocab(97)
    with pytest.raises(ModelError, match="positions='alibi'"):
        tiny("gpt", positions="alibi")


def test_gpt_rope_variant_has_no_position_table():
    model = tiny("gpt", positions="rope")
    assert model.wpe is None
    x = tokens()
    assert model(x).shape == (2, 16, VOCAB)
