"""HF checkpoint I/O without transformers: round trips, refusals and shape errors."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.errors import CheckpointShapeError, ModelError, UnsupportedArchitectureError
from theseus.models.hf import load_hf, save_hf

from tests.models.conftest import VOCAB, tiny


@pytest.mark.parametrize(
    "family",
    ["gpt", "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma3", "deepseek_v3"],
)
def test_theseus_to_hf_to_theseus_is_bit_exact(family, tmp_path):
    model = tiny(family)
    save_hf(model, tmp_path)
    again = load_hf(tmp_path)
    assert again.family == family
    before = nnx.to_flat_state(nnx.state(model, nnx.Param))
    after = dict(nnx.to_flat_state(nnx.state(again, nnx.Param)))
    for path, var in before:
        assert np.array_equal(np.asarray(var[...]), np.asarray(after[path][...])), path
    x = jnp.arange(10)[None] % VOCAB
    np.testing.assert_array_equal(model(x), again(x))


def test_unsupported_architecture_names_it_and_lists_the_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    with pytest.raises(UnsupportedArchitectureError) as error:
        load_hf(tmp_path)
    message = str(error.value)
    assert "MambaForCausalLM" in message
    for supported in (
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
    ):
        assert supported in message


def test_checkpoint_that_does_not_fit_the_config(tmp_path):
    save_hf(tiny("llama"), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_key_value_heads"] = 4  # the tensors hold 2 kv heads
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointShapeError,
        match=r"k_proj.weight' has shape \(32, 64\) but the "
        r"config needs \(64, 64\).*n_kv_heads=4",
    ):
        load_hf(tmp_path)


def test_missing_tensor_and_not_a_checkpoint(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        load_hf(tmp_path)
    save_hf(tiny("qwen3"), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointShapeError, match="no tensor 'model.layers.2"):
        load_hf(tmp_path)


def test_variants_without_a_transformers_class_are_not_exported(tmp_path):
    with pytest.raises(ModelError, match="only GPT-2 proper"):
        save_hf(tiny("gpt", positions="rope"), tmp_path)
    with pytest.raises(ModelError, match="sliding_window=8"):
        save_hf(tiny("llama", sliding_window=8), tmp_path)


def test_special_tokens_survive_the_round_trip(tmp_path):
    import json as _json

    save_hf(tiny("llama"), tmp_path / "a")
    config = _json.loads((tmp_path / "a" / "config.json").read_text())
    config.update(bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0)
    (tmp_path / "a" / "config.json").write_text(_json.dumps(config))
    model = load_hf(tmp_path / "a")
    assert dict(model.special_tokens) == {
        "bos_token_id": 1,
        "eos_token_id": (2, 3),
        "pad_token_id": 0,
    }
    save_hf(model, tmp_path / "b")
    assert _json.loads((tmp_path / "b" / "config.json").read_text())["eos_token_id"] == [2, 3]
    hash(nnx.graphdef(model))
