"""Composition by inheritance: override one stage of a layer, everything else stays.

The same example is in docs/models.md.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.layers import Attention
from theseus.models.layers.attention import heads_first
from theseus.models.llama.model import Llama

from tests.models.conftest import VOCAB, needs_parity, tiny


class SoftCappedAttention(Attention):
    """Gemma-2 style soft-capping of the attention scores: ``cap * tanh(scores / cap)``."""

    cap = 5.0

    def scores(self, q, k):
        return self.cap * jnp.tanh(super().scores(q, k) / self.cap)


class SoftCappedLlama(Llama):
    attention_cls = SoftCappedAttention


@contextlib.contextmanager
def cap(value: float):
    old, SoftCappedAttention.cap = SoftCappedAttention.cap, value
    try:
        yield
    finally:
        SoftCappedAttention.cap = old


def with_params_of(model_cls, source):
    """A ``model_cls`` model holding ``source``'s parameters."""
    target = model_cls(source.config, rngs=nnx.Rngs(params=1))
    nnx.update(target, nnx.state(source, nnx.Param))
    return target


def test_overriding_scores_changes_exactly_the_scores():
    base = tiny("llama")
    capped = with_params_of(SoftCappedLlama, base)
    # same parameters, same paths: nothing but the score function differs
    assert jax.tree.structure(nnx.state(capped)) == jax.tree.structure(nnx.state(base))
    x = jax.random.randint(jax.random.key(0), (2, 12), 0, VOCAB)
    with cap(1e-3):  # random-init scores are ~1e-2: a cap this low changes them
        assert np.abs(capped(x) - base(x)).max() > 1e-5

    # the other stages are untouched: feed the same q, k and compare the stage outputs
    attn, ref = capped.layer(0).attention, base.layer(0).attention
    h = jax.random.normal(jax.random.key(1), (2, 12, 64))
    q, k, v = attn.project_qkv(h)
    for mine, theirs in zip((q, k, v), ref.project_qkv(h), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    q, k = heads_first(q), heads_first(k)  # the score stages take the heads first
    with cap(1e-3):
        s, s_ref = attn.scores(q, k), ref.scores(q, k)
        np.testing.assert_allclose(s, 1e-3 * jnp.tanh(s_ref / 1e-3), rtol=1e-5, atol=1e-9)

    # with a cap far above the scores the capped model reproduces the base model
    with cap(1e6):
        np.testing.assert_allclose(capped(x), base(x), atol=1e-5)


@pytest.mark.parity
@needs_parity
def test_hf_import_into_a_subclass(hf_checkpoint):
    import torch
    import transformers
    from theseus.models.hf import config_from_hf, params_from_hf, read_config, read_tensors

    directory = hf_checkpoint("llama-gqa2")
    family, config = config_from_hf(read_config(directory))
    model = params_from_hf(family, config, read_tensors(directory), model_cls=SoftCappedLlama)
    assert isinstance(model.layer(0).attention, SoftCappedAttention)
    x = np.random.RandomState(0).randint(0, VOCAB, (2, 10))
    ref = transformers.AutoModelForCausalLM.from_pretrained(directory)
    with torch.no_grad():
        expected = ref(torch.tensor(x)).logits.numpy()
    with cap(1e6):  # imported weights + a neutral cap: the HF logits
        assert np.abs(np.asarray(model(jnp.asarray(x))) - expected).max() < 1e-4
    with cap(0.1):  # a binding cap: only the score function differs from HF
        assert np.abs(np.asarray(model(jnp.asarray(x))) - expected).max() > 1e-4
