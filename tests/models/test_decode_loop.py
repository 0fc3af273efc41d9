"""The compiled decoding loop (``theseus.models.decoding``): the tokens of a host loop that
steps the model a token at a time, a loop that ends when every row has stopped, and the
decoding kernel (``layers/decode_attention.py``) against plain JAX in Pallas' interpreter.

Tolerances: the two loops run the same float32 operations in different programs, so logits
may differ in their last bits (fusion and reduction order), about 1e-6 relative; a sampled
token could only differ where two Gumbel-perturbed logits tie within that, which the
handful of draws here never meets (a flip would fail the test loudly, not pass it). The
log-probabilities are compared to 1e-5: a log-softmax over 97 logits of magnitude ~1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from theseus.models.generate import generate_with_logprobs
from theseus.models.layers.decode_attention import decode_attention, decode_attention_reference
from theseus.models.sampling import Sampling

from tests.models.conftest import tiny
from tests.models.stepwise_decoder import stepwise

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [40, 41, 42, 43], [3]]


@pytest.mark.parametrize("family", ["gpt", "mistral", "deepseek_v3"])
def test_the_compiled_loop_draws_the_tokens_of_a_host_loop(family):
    """GPT (multi-head, learned positions), Mistral (grouped heads, an 8-token sliding window
    the 20 tokens outrun) and DeepSeek-V3 (latent attention, layers in a Python loop)."""
    model = tiny(family)
    how = Sampling(temperature=1.0, top_k=0, top_p=1.0)
    seeds = [11, 12, 13, 14]
    ours = generate_with_logprobs(model, PROMPTS, max_new_tokens=20, temperature=1.0, seeds=seeds)
    theirs = stepwise(model, PROMPTS, max_new_tokens=20, how=how, seeds=seeds)
    assert ours[0] == theirs[0]
    for a, b in zip(ours[1], theirs[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    if family != "gpt":
        return
    # one key for the batch, split every turn, and a stop token
    stop = theirs[0][0][3]
    batch = generate_with_logprobs(
        model, PROMPTS, max_new_tokens=12, temperature=1.0, seed=7, stop_tokens=[stop]
    )
    reference = stepwise(model, PROMPTS, max_new_tokens=12, how=how, seed=7, stops=(stop,))
    assert batch[0] == reference[0]


def test_the_loop_ends_when_every_row_has_stopped():
    from flax import nnx
    from theseus.models.decoding import DecodePlan, decode_loop
    from theseus.models.generate import left_pad

    model = tiny("llama")
    greedy = generate_with_logprobs(model, PROMPTS, max_new_tokens=30)[0]
    stops = tuple(sorted({row[2] for row in greedy}))  # every row stops by its third token
    tokens, segments, positions = left_pad(PROMPTS)
    plan = DecodePlan(max_new_tokens=30, stops=stops, cache_slots=tokens.shape[1] + 30)
    graphdef, state = nnx.split(model)
    run = jax.jit(decode_loop, static_argnums=(0, 1))
    out = run(graphdef, plan, (state,), tokens, positions, segments, jax.random.key(0))
    assert int(out.turns) <= 3  # not 30: the loop stops with the last row
    assert all(set(row[:3]) & set(stops) for row in np.asarray(out.tokens).tolist())


def random_cache(B, S, K, G, H, layers=2):
    keys = jax.random.split(jax.random.key(0), 3)
    k = jax.random.normal(keys[0], (layers, B, S, G * K))
    v = jax.random.normal(keys[1], (layers, B, S, G * K))
    q = jax.random.normal(keys[2], (B, H, K))
    return q, k, v


@pytest.mark.parametrize(
    "rows, end, window",
    [(8, 9, 0), (8, 256, 0), (8, 230, 37), (12, 140, 13)],
)
def test_the_decoding_kernel_reads_what_plain_jax_reads(rows, end, window):
    """Blocks of 128 slots: a fill inside the first block, a full cache, across blocks with a
    window starting mid-block; rows with left padding of their own; 8-row blocks and (for 12
    rows) one block of every row; two kv heads of 32 side by side, 2 queries each."""
    B, S, K, G, H = rows, 256, 32, 2, 4
    q, k, v = random_cache(B, S, K, G, H)
    first = jnp.asarray(np.arange(B) % 5, jnp.int32)  # row b's first slots are padding
    kw = dict(window=window, scale=0.3)
    ours = decode_attention(q, k, v, 1, jnp.int32(end), first, interpret=True, **kw)
    plain = decode_attention_reference(q, k, v, 1, jnp.int32(end), first, **kw)
    np.testing.assert_allclose(ours, plain, rtol=0, atol=2e-6)


def test_the_kernel_reader_decodes_the_tokens_of_plain_jax():
    model = tiny("qwen3")
    kw = dict(max_new_tokens=6, temperature=1.0, seeds=[1, 2, 3, 4])
    plain = generate_with_logprobs(model, PROMPTS, reader="reference", **kw)
    kernel = generate_with_logprobs(model, PROMPTS, reader="pallas_interpret", **kw)
    assert kernel[0] == plain[0]
    for a, b in zip(kernel[1], plain[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
