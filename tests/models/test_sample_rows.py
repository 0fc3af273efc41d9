"""Sampling with one seed per row (``generate(..., seeds=...)``, the ``theseus_sample`` hook):
a row's completion is a function of its prompt and its seed, not of the rest of the batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.models.generate import generate, generate_with_logprobs
from theseus.models.gpt.config import GPTConfig
from theseus.models.gpt.model import GPT


def tiny_gpt() -> GPT:
    config = GPTConfig(vocab_size=50, n_layers=1, d_model=32, n_heads=2, max_seq_len=32)
    return GPT(config, rngs=nnx.Rngs(0))


def test_a_rows_sample_depends_on_its_seed_alone():
    model = tiny_gpt()
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    kwargs = dict(max_new_tokens=8, temperature=1.0, top_k=0, top_p=1.0)
    together = generate(model, prompts, seeds=[11, 12, 13], **kwargs)
    alone = [
        generate(model, [p], seeds=[s], **kwargs)[0]
        for p, s in zip(prompts, [11, 12, 13], strict=True)
    ]
    assert together == alone  # batch composition and row order do not matter
    swapped = generate(model, prompts[::-1], seeds=[13, 12, 11], **kwargs)
    assert swapped == together[::-1]
    other = generate(model, prompts, seeds=[21, 22, 23], **kwargs)
    assert other != together  # 3 rows x 8 tokens of a 50-token vocab: equal by chance ~never


def test_a_setups_sampler_draws_what_generate_draws():
    """``theseus_sampler``: the compiled sampler of a training setup (its model, its mesh,
    the trainer's parameters) against ``generate`` on the same model, row seeds and
    filters: the same program, so the same tokens and log-probabilities."""
    from theseus.core.plugins import registries
    from theseus.core.recipes.grpo_run import make_sampler
    from theseus.core.runner import config_for, job_spec
    from theseus.core.sampler import SamplerRequest
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    overrides = ["model.n_layers=1", "model.d_model=32", "model.n_heads=2"]
    overrides += ["model.max_seq_len=32", "training.global_batch_size=2", "training.seq_len=16"]
    tree = config_for(job_spec("gpt/train/pretrain", regs), regs, overrides)
    setup = TrainSetup.build(tree.to_object(TrainJobConfig), regs, 50)
    params = setup.init_state().params
    prompts, seeds = [[1, 2, 3], [4, 5]], [5, 6]
    how = dict(max_new_tokens=6, temperature=0.7, top_k=10, top_p=0.9)
    request = SamplerRequest(rows=2, prompt_width=3, stop_tokens=(), pad_id=0, **how)
    out = make_sampler(setup, request)(params, prompts, seeds)
    direct = generate_with_logprobs(setup.model(params), prompts, seeds=seeds, **how)
    assert out[0] == direct[0] and all(len(row) == 6 for row in out[0])
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(direct[1]), rtol=0, atol=1e-6)


def test_the_decoders_log_probs_are_the_full_forward_pass_ones():
    """What GRPO logs as the sampler/trainer gap: the KV-cache decoder's log-probs of the
    tokens it drew against a full forward pass over prompt + completion, at temperature 0.7;
    float32 and two attention paths: equal to ~1e-6."""
    model = tiny_gpt()
    prompt = [1, 2, 3, 4]
    (tokens,), (logps,) = generate_with_logprobs(
        model, [prompt], max_new_tokens=8, temperature=0.7, seeds=[3]
    )
    row = jnp.asarray([prompt + tokens])
    logits = model(row[:, :-1]).astype(jnp.float32) / 0.7
    full = jax.nn.log_softmax(logits, axis=-1)[0, len(prompt) - 1 :]
    expected = np.take_along_axis(np.asarray(full), np.asarray(tokens)[:, None], -1)[:, 0]
    np.testing.assert_allclose(logps, expected, rtol=0, atol=2e-5)
