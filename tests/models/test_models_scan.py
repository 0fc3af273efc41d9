"""Stacked blocks under a scan: the compiled step stays the same size at any depth.

The blocks' parameters carry a leading ``layers`` axis and the decoder scans over it; a
family whose blocks differ per layer opts out (``scan_layers = False``) and gets a Python
loop, which is also the ``unrolled()`` view time travel records.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.models.gpt.model import GPT

from tests.models.conftest import VOCAB, tiny


def tokens(batch: int = 2, length: int = 16, seed: int = 0) -> jax.Array:
    return jax.random.randint(jax.random.key(seed), (batch, length), 1, VOCAB)


def compiled_sizes(n_layers: int) -> tuple[int, int]:
    """Text lengths of the lowered and the optimized program of a GPT's forward + backward
    (width 64): deterministic, unlike compile times on a shared machine."""
    model = tiny("gpt", n_layers=n_layers)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    x_BxT = tokens(2, 32)

    def loss(params: Any, x_BxT: jax.Array) -> jax.Array:
        logits_BxTxV = nnx.merge(graphdef, params, rest)(x_BxT)
        return jnp.mean(jax.nn.logsumexp(logits_BxTxV, axis=-1))

    lowered = jax.jit(jax.grad(loss)).lower(params, x_BxT)
    return len(lowered.as_text()), len(lowered.compile().as_text())


def test_the_compiled_step_does_not_grow_with_depth():
    # measured: optimized HLO 338k characters at 2 layers, 340k at 24 (a Python loop over the
    # layers: 265k and 4.55M); compile 1.0 s at both depths (the loop: 0.5 s and 3.5 s)
    lowered_2, compiled_2 = compiled_sizes(2)
    lowered_24, compiled_24 = compiled_sizes(24)
    assert lowered_24 <= 1.5 * lowered_2, (lowered_2, lowered_24)
    assert compiled_24 <= 1.5 * compiled_2, (compiled_2, compiled_24)


@pytest.mark.parametrize("family", ["gpt", "qwen3_moe"])
def test_block_parameters_have_a_leading_layers_axis(family):
    model = tiny(family, n_layers=3)
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    blocks = [(path, var) for path, var in flat if path[0] == "blocks"]
    assert blocks
    for path, var in blocks:
        assert var.get_metadata()["out_sharding"][0] == "layers", path
        assert var[...].shape[0] == 3, path
    # one layer cut out of the stack is an ordinary block, its parameters that layer's row
    layer = model.layer(2)
    kernel = model.blocks.attention.q_proj.kernel[...]
    np.testing.assert_array_equal(layer.attention.q_proj.kernel[...], kernel[2])
    assert layer.attention.q_proj.kernel.get_metadata()["out_sharding"][0] == "embed"
    # every layer draws its own random numbers, with the same init statistics
    assert not np.array_equal(kernel[0], kernel[1])
    stds = np.std(np.asarray(kernel).reshape(3, -1), axis=1)
    np.testing.assert_allclose(stds, model.config.init_std, rtol=0.1)


@pytest.mark.parametrize("family", ["gpt", "qwen3_moe"])
def test_the_unrolled_view_and_the_loop_fallback_compute_the_same(family):
    x = tokens()
    model = tiny(family, n_layers=3)
    view = model.unrolled()
    assert isinstance(view.blocks, nnx.List) and len(view.blocks) == 3
    assert view.embed.embedding.get_value() is model.embed.embedding.get_value()
    logits, aux, stats, _ = model.forward_with_stats(x)
    view_logits, view_aux, view_stats, _ = view.forward_with_stats(x)
    np.testing.assert_allclose(view_logits, logits, atol=1e-5)
    for name in aux:
        np.testing.assert_allclose(view_aux[name], aux[name], rtol=1e-5)
    assert sorted(view_stats) == sorted(stats)

    class LoopGPT(GPT):
        scan_layers = False

    loop = LoopGPT(tiny("gpt", n_layers=3).config, rngs=nnx.Rngs(params=0))
    assert isinstance(loop.blocks, nnx.List) and loop.unrolled() is loop
    assert loop.flops_per_token(32) == tiny("gpt", n_layers=3).flops_per_token(32)
    assert loop(x).shape == (2, 16, VOCAB)


def test_the_cache_is_scanned_with_the_layers():
    model = tiny("llama", n_layers=3)
    x = tokens(2, 12)
    full = model(x)
    cache = model.init_cache(2, 16)
    positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
    segments = jnp.ones((2, 12), jnp.int32)
    first, cache = model.decode(
        x[:, :8], cache, positions=positions[:, :8], segment_ids=segments[:, :8]
    )
    rest, cache = model.decode(
        x[:, 8:], cache, positions=positions[:, 8:], segment_ids=segments[:, 8:]
    )
    np.testing.assert_allclose(jnp.concatenate([first, rest], axis=1), full, atol=1e-5)
    assert cache.k.shape[0] == 3 and int(cache.index) == 12
    # each layer wrote its own keys
    assert not np.allclose(cache.k[0, :, :, :12], cache.k[1, :, :, :12])


def test_scanned_and_looped_blocks_are_checkpointed_by_one_function():
    """Both forms of the stack take their remat from ``remat.checkpointed``: in a scan every
    level is its policy without remat's barrier (the scan is one), in a loop ``none`` is the
    function itself and every other level its policy behind the barrier."""
    import inspect

    from theseus.core.sharding.remat import LEVELS, POLICIES, checkpointed
    from theseus.models.layers.decoder import DecoderLM

    source = inspect.getsource(DecoderLM.run_blocks)
    assert "checkpointed(" in source
    assert "nnx.remat" not in source and "jax.checkpoint" not in source

    def block(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ w)

    w, x = jnp.ones((3, 3)), jnp.ones((2, 3))
    for level in LEVELS:
        for scanned in (True, False):
            eqns = jax.make_jaxpr(checkpointed(block, level, scanned=scanned))(w, x).eqns
            if level == "none" and not scanned:
                assert [e.primitive.name for e in eqns] == ["dot_general", "tanh"]
                continue
            (remat,) = eqns
            assert remat.params["policy"] is POLICIES[level], (level, scanned)
            assert remat.params["prevent_cse"] is not scanned, (level, scanned)
