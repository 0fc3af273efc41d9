"""The learning step's rows sized to the rollouts (``theseus.core.recipes.grpo_rows``): the
buckets a step compiles for, and the same loss and gradients as rows padded to
``training.seq_len``.

Padding at the end of a row is masked out of attention (segment 0) and of the loss (mask 0),
so the bucketed rows compute the padded rows' loss from the same terms; only the float32
sums over more (zero) terms are blocked differently and may round differently. The loss:
1e-6 relative. A gradient element sums up to B x T = 768 per-position terms, some of
opposite signs: its rounding is bounded by n eps max|term| (about 5e-5 of the largest
gradient element); the test allows 1e-5 of the largest element of all gradients (tensors
whose exact gradient is 0, like a key bias under softmax, hold only rounding noise).
"""

from __future__ import annotations

import jax
import numpy as np
from theseus.core.recipes.grpo_rows import bucket_for, bucket_lengths, rollout_rows


def test_buckets_double_from_the_quantum_up_to_the_sequence():
    assert bucket_lengths(1088, 128) == [128, 256, 512, 1024, 1088]
    assert bucket_lengths(96, 16) == [16, 32, 64, 96]
    assert bucket_for(40, 1088, 128) == 128  # ~40-token rollouts: the first bucket
    assert bucket_for(129, 1088, 128) == 256
    assert bucket_for(1050, 1088, 128) == 1088
    assert bucket_for(5000, 1088, 128) == 1088  # never beyond the sequence


def test_rows_padded_to_their_bucket_give_the_padded_loss_and_gradients():
    from theseus.core.plugins import registries
    from theseus.core.recipes.grpo import GRPOJob
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    overrides = ["model.n_layers=2", "model.d_model=32", "model.n_heads=2"]
    overrides += ["model.max_seq_len=128", "training.seq_len=96", "training.global_batch_size=8"]
    overrides += ["grpo.generations=4", "grpo.beta=0.04"]  # the KL term's reference too
    tree = config_for(job_spec("gpt/train/grpo", regs), regs, overrides)
    config = tree.to_object(GRPOJob.config_type)
    setup = TrainSetup.build(config, regs, 40, GRPOJob.recipe(config))
    state = setup.init_state()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 40, 5 + r % 3).tolist() for r in range(8)]
    completions = [rng.integers(1, 40, 4 + r).tolist() for r in range(8)]  # 4..11 tokens
    advantages = rng.normal(size=8).astype(np.float32)
    logps = [rng.normal(size=len(c)).tolist() for c in completions]

    def loss_and_grads(T: int):
        batch = rollout_rows(prompts, completions, advantages, T, logps)
        grad = jax.jit(jax.grad(setup.objective, has_aux=True))
        grads, (total, count, _) = grad(state.params, state.frozen, batch, None)
        return float(total / count), grads

    loss_padded, grads_padded = loss_and_grads(96)
    longest = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True)) - 1
    T = bucket_for(longest, 96, 16)
    assert T == 16  # the longest row has 17 tokens: 16 inputs
    loss_bucket, grads_bucket = loss_and_grads(T)
    np.testing.assert_allclose(loss_bucket, loss_padded, rtol=1e-6, atol=1e-9)
    flat_p, flat_b = jax.tree.leaves(grads_padded), jax.tree.leaves(grads_bucket)
    assert any(np.abs(np.asarray(g)).max() > 0 for g in flat_p)
    scale = max(float(np.abs(np.asarray(g)).max()) for g in flat_p)
    for a, b in zip(flat_p, flat_b, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=1e-5 * scale)
