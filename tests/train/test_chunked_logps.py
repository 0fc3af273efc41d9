"""Token log-probabilities taken a few positions at a time (``train/chunked_logps.py``)
against the whole logits: values and gradients to float32 rounding (the same products and
sums, a piece at a time). The logits here reach about 20 after the temperature: a
log-probability is a difference of such terms, 1e-6 relative + 1e-6 absolute; the entropy
``logsumexp(z) - sum p z`` cancels two of them, so its rounding is about 20 x eps x a few:
1e-5 absolute."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from theseus.core.recipes.grpo_loss import token_entropy
from theseus.core.recipes.logprobs import token_logps
from theseus.core.train.chunked_logps import chunked_token_stats


def test_pieces_score_the_tokens_as_the_whole_logits_do():
    keys = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(keys[0], (3, 12, 8))
    table = jax.random.normal(keys[1], (40, 8))
    targets = jax.random.randint(keys[2], (3, 12), 0, 40).at[0, -2:].set(-100)
    weights = jnp.linspace(-1, 1, 36).reshape(3, 12)

    def head(h):
        return h @ table.T

    def whole(hidden, table):
        logits = hidden @ table.T
        return token_logps(logits, targets, 0.7), token_entropy(logits, 0.7)

    def pieces(hidden, table):
        return chunked_token_stats(lambda h: h @ table.T, hidden, targets, 0.7, chunks=4)

    (lp_whole, ent_whole), (lp_pieces, ent_pieces) = whole(hidden, table), pieces(hidden, table)
    np.testing.assert_allclose(lp_pieces, lp_whole, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ent_pieces, ent_whole, rtol=0, atol=1e-5)
    grad_whole = jax.grad(lambda h, t: jnp.sum(whole(h, t)[0] * weights), (0, 1))(hidden, table)
    grad_pieces = jax.grad(lambda h, t: jnp.sum(pieces(h, t)[0] * weights), (0, 1))(hidden, table)
    for a, b in zip(grad_whole, grad_pieces, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # the entropy is reported, not trained: no gradient flows through it
    zero = jax.grad(lambda h: jnp.sum(pieces(h, table)[1]))(hidden)
    assert float(jnp.abs(zero).max()) == 0.0
    assert head(hidden).shape == (3, 12, 40)
