"""Parity with transformers on tiny random models (fp32).

Tolerance: logits are sums of products over at most 48-wide dot products through 2 blocks;
fp32 has a unit roundoff of 6e-8, and a different summation order (XLA vs torch) changes
each dot product by at most ~n * u * sum|terms| ~ 1e-6 for these magnitudes (|logit| < 1).
1e-4 leaves a 100x margin for layer-to-layer growth while still catching any real mismatch
(a swapped bias, a wrong RoPE frequency or a missing norm gain moves logits by >1e-3).
Exported weights are bit-identical, so HF on them must agree to 1e-5 (in fact exactly).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.models.conftest import HF_MODELS, LLAMA3_ROPE, VOCAB, needs_parity

pytestmark = [pytest.mark.parity, needs_parity]

LOGIT_TOL = 1e-4
MEASURED: dict[str, float] = {}


def batch() -> tuple[np.ndarray, np.ndarray]:
    """Three rows of 12 tokens; rows 1 and 2 right-padded (mask 0) after 7 and 3 tokens."""
    rng = np.random.RandomState(0)
    tokens = rng.randint(3, VOCAB, (3, 12)).astype(np.int64)
    mask = np.ones_like(tokens)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    tokens[mask == 0] = 0
    return tokens, mask


def hf_forward(directory, tokens, mask, **kwargs):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(directory)
    model.eval()
    labels = np.where(mask == 1, tokens, -100)
    with torch.no_grad():
        out = model(
            torch.tensor(tokens),
            attention_mask=torch.tensor(mask),
            labels=torch.tensor(labels),
            **kwargs,
        )
    return out


def our_loss(logits, tokens, mask) -> float:
    logp = np.asarray(jax_log_softmax(logits))[:, :-1]
    target = tokens[:, 1:]
    valid = mask[:, 1:] == 1
    picked = np.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    return float(-(picked * valid).sum() / valid.sum())


def jax_log_softmax(logits):
    import jax

    return jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)


@pytest.mark.parametrize("name", sorted(HF_MODELS))
def test_imported_logits_and_loss_match_hf(name, hf_checkpoint):
    from theseus.models.hf import load_hf

    directory = hf_checkpoint(name)
    tokens, mask = batch()
    ref = hf_forward(directory, tokens, mask)
    model = load_hf(directory)
    logits = np.asarray(model(jnp.asarray(tokens), segment_ids=jnp.asarray(mask)))
    real = mask == 1
    diff = float(np.abs(logits - ref.logits.numpy())[real].max())
    MEASURED[name] = diff
    print(f"\n{name}: max |logit - HF| = {diff:.2e}")
    assert diff < LOGIT_TOL
    assert our_loss(logits, tokens, mask) == pytest.approx(float(ref.loss), abs=1e-5)


@pytest.mark.parametrize("name", sorted(HF_MODELS))
def test_export_is_bit_exact_and_loads_in_transformers(name, hf_checkpoint, tmp_path):
    import torch
    import transformers
    from theseus.models.hf import load_hf, params_to_hf, read_tensors, save_hf

    directory = hf_checkpoint(name)
    original = read_tensors(directory)
    model = load_hf(directory)
    exported = params_to_hf(model.family, model)
    assert sorted(exported) == sorted(original)
    for key, value in original.items():
        assert exported[key].dtype == value.dtype and np.array_equal(exported[key], value), key

    save_hf(model, tmp_path / "out")
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokens, mask = batch()
    ref = hf_forward(directory, tokens, mask).logits.numpy()
    with torch.no_grad():
        again = loaded(torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits.numpy()
    assert np.abs(again - ref)[mask == 1].max() <= 1e-5


def assert_greedy_matches_hf(directory, new_tokens: int) -> None:
    """Greedy decoding of the checkpoint in ``directory`` gives transformers' tokens for
    left-padded prompts of different lengths, ``new_tokens`` each (no stop)."""
    import torch
    import transformers
    from theseus.models.generate import generate
    from theseus.models.hf import load_hf

    prompts = [[5, 9, 14, 20, 33, 40], [7, 8, 9], [60, 61, 62, 63]]
    ours = generate(load_hf(directory), prompts, max_new_tokens=new_tokens)

    ref = transformers.AutoModelForCausalLM.from_pretrained(directory)
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = ref.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    assert ours == out[:, width:].tolist()


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa2", "qwen3", "qwen3_moe"])
def test_greedy_generation_matches_hf_generate(name, hf_checkpoint):
    assert_greedy_matches_hf(hf_checkpoint(name), 10)


def test_moe_load_balancing_loss_matches_hf(hf_checkpoint):
    from theseus.models.hf import load_hf

    directory = hf_checkpoint("qwen3_moe")
    tokens, mask = batch()
    mask[:] = 1  # transformers masks the aux loss with attention_mask too; compare unpadded
    ref = hf_forward(directory, tokens, mask, output_router_logits=True)
    model = load_hf(directory)
    _, aux = model.forward_with_aux(jnp.asarray(tokens))
    expected = model.config.router_aux_loss_coef * float(ref.aux_loss)
    assert float(aux["moe_load_balance"]) == pytest.approx(expected, rel=1e-5)


def test_llama3_rope_frequencies_match_transformers():
    import transformers
    from theseus.models.layers.rope import Llama3Scaling, inverse_frequencies
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(
        hidden_size=512,
        num_attention_heads=4,
        rope_parameters={**LLAMA3_ROPE, "original_max_position_embeddings": 8192},
    )
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours = inverse_frequencies(128, 500000.0, Llama3Scaling(8.0, 1.0, 4.0, 8192))
    np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-6)
    assert not np.allclose(ours, inverse_frequencies(128, 500000.0))  # the scaling did something


def test_unsupported_architecture_is_refused(tmp_path):
    import transformers
    from theseus.models.errors import UnsupportedArchitectureError
    from theseus.models.hf import load_hf

    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
    )
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="GPTNeoXForCausalLM.*LlamaForCausalLM"):
        load_hf(tmp_path)
