"""KV-cache generation: exactness against the full forward, batching, stop tokens, sampling."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from theseus.models.generate import generate, left_pad

from tests.models.conftest import VOCAB, tiny


@pytest.mark.parametrize("family", ["gpt", "llama", "qwen3_moe"])
def test_prefill_then_decode_reproduces_the_full_forward(family):
    model = tiny(family)
    x = jnp.asarray(np.random.RandomState(0).randint(1, VOCAB, (2, 12)))
    full = model(x)
    cache = model.init_cache(2, 16)
    ones = jnp.ones((2, 5), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
    logits, cache = model.decode(x[:, :5], cache, positions=pos, segment_ids=ones)
    steps = [logits]
    for t in range(5, 12):
        step, cache = model.decode(
            x[:, t : t + 1],
            cache,
            positions=jnp.full((2, 1), t),
            segment_ids=jnp.ones((2, 1), jnp.int32),
        )
        steps.append(step)
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)
    assert int(cache.index) == 12


def test_batched_prompts_of_different_lengths_match_one_by_one():
    model = tiny("llama")
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [40, 41, 42, 43]]
    batched = generate(model, prompts, max_new_tokens=6)
    alone = [generate(model, [p], max_new_tokens=6)[0] for p in prompts]
    assert batched == alone
    tokens, segments, positions = left_pad(prompts)
    assert tokens.shape == (3, 7) and segments[1].tolist() == [0] * 5 + [1, 1]
    assert positions[1].tolist() == [0] * 6 + [1]


def test_stop_tokens_end_a_row_and_are_kept():
    model = tiny("gpt")
    prompts = [[3, 4, 5], [9, 8]]
    free = generate(model, prompts, max_new_tokens=8)
    stop = free[0][2]
    stopped = generate(model, prompts, max_new_tokens=8, stop_tokens=[stop])
    assert stopped[0] == free[0][: free[0].index(stop) + 1]
    expected_1 = free[1][: free[1].index(stop) + 1] if stop in free[1] else free[1]
    assert stopped[1] == expected_1


def test_sampling_is_seeded_and_filters_work():
    model = tiny("qwen3")
    prompts = [[3, 4, 5], [9, 8]]
    greedy = generate(model, prompts, max_new_tokens=8)
    kw = dict(max_new_tokens=8, temperature=1.5)
    a = generate(model, prompts, seed=1, **kw)
    assert a == generate(model, prompts, seed=1, **kw)  # reproducible
    assert a != generate(model, prompts, seed=2, **kw)  # the seed matters
    assert a != greedy
    assert generate(model, prompts, seed=3, top_k=1, **kw) == greedy  # top-1 is argmax
    assert generate(model, prompts, seed=3, top_p=1e-6, **kw) == greedy  # nucleus of one


def test_sample_top_k_and_top_p_keep_the_right_tokens():
    import jax
    from theseus.models.generate import sample

    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.key(0), 300)
    draw = lambda **kw: {int(sample(logits, k, 1.0, **kw)[0]) for k in keys}  # noqa: E731
    assert draw(top_k=2, top_p=1.0) == {0, 1}
    assert draw(top_k=0, top_p=0.7) == {0, 1}  # 0.5 < 0.7, 0.5 + 0.3 covers it
    assert draw(top_k=0, top_p=1.0) == {0, 1, 2, 3}


def test_generation_errors_name_the_values():
    from theseus.models.errors import ModelError, VocabMismatchError

    model = tiny("gpt")
    with pytest.raises(VocabMismatchError, match="token id 500.*vocab_size=97"):
        generate(model, [[1, 500]], max_new_tokens=2)
    with pytest.raises(ModelError, match="60 tokens \\+ max_new_tokens=10 = 70.*max_seq_len=64"):
        generate(model, [[1] * 60], max_new_tokens=10)
