"""The GRPO objective's pieces against their formulas, and the whole loss against TRL.

Hand-made cases check the advantages (all-equal rewards: zero, no NaN), the clipped ratio
and the k3 KL. The parity tests run TRL's own ``GRPOTrainer._compute_loss`` unbound, on a
stand-in that hands it fixed per-token log-probs (what the model would have returned), and
TRL's ``nanstd`` for the group advantages. Our loss runs in float32 in JAX, TRL's in float32
in torch, so they agree to a few float32 ulps of the loss (atol 1e-6 on numbers of order 1).
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from theseus.core.errors import ConfigError
from theseus.core.recipes.grpo_config import GRPOConfig
from theseus.core.recipes.grpo_loss import (
    aggregate,
    clipped_token_loss,
    group_advantages,
    grpo_loss,
    k3_kl,
    token_entropy,
)
from theseus.core.recipes.logprobs import token_logps

from tests.train.conftest import trl_parity

G = 4
# three groups of four: varied, all equal (zero advantage), one winner
REWARDS = np.array([1.0, 0.0, 0.5, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], np.float32)
B, T = len(REWARDS), 7


def fixed_batch(seed: int = 0):
    """Per-token log-probs of the policy, the sampler (old) and the reference, and a mask of
    completions of 1 to T tokens; the old log-probs differ from the policy's by up to ±0.6 so
    that both sides of the clip range are reached."""
    rng = np.random.default_rng(seed)
    logp = rng.uniform(-3.0, -0.05, (B, T)).astype(np.float32)
    old = (logp + rng.uniform(-0.6, 0.6, (B, T))).astype(np.float32)
    ref = (logp + rng.uniform(-0.8, 0.8, (B, T))).astype(np.float32)
    lengths = np.array([1, 7, 3, 5, 2, 7, 4, 6, 7, 1, 3, 5])
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.float32)
    return logp, old, ref, mask


# --- the pieces -------------------------------------------------------------------------


def test_group_advantages_match_the_formula_and_equal_rewards_give_zero():
    adv = np.asarray(group_advantages(REWARDS, G, "group", 1e-4))
    assert np.all(np.isfinite(adv))
    r = REWARDS.reshape(-1, G).astype(np.float64)
    expected = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
    np.testing.assert_allclose(adv, expected.reshape(-1), rtol=1e-6, atol=1e-6)
    assert np.all(adv[4:8] == 0.0)  # the all-equal group: exactly zero
    # each group's advantages sum to zero and (up to ε) have unit sample std
    np.testing.assert_allclose(adv.reshape(-1, G).sum(1), 0.0, atol=1e-5)


def test_rloo_advantage_is_reward_minus_the_mean_of_the_others():
    adv = np.asarray(group_advantages(REWARDS, G, "rloo"))
    r = REWARDS.reshape(-1, G)
    expected = [[r[p, i] - (r[p].sum() - r[p, i]) / (G - 1) for i in range(G)] for p in range(3)]
    np.testing.assert_allclose(adv, np.ravel(expected), rtol=1e-6, atol=1e-7)
    assert np.all(adv[4:8] == 0.0)


def test_clipped_loss_on_hand_made_ratios():
    # ratios 0.5, 1.0, 1.1, 1.5 with ε_low = 0.2, ε_high = 0.28
    logp = jnp.log(jnp.array([[0.5, 1.0, 1.1, 1.5]], jnp.float32))
    old = jnp.zeros_like(logp)
    for a in (2.0, -2.0):
        loss, active = clipped_token_loss(logp, old, jnp.array([a]), 0.2, 0.28)
        if a > 0:  # min(ρA, clip(ρ)A): the gain stops growing above 1 + ε_high
            expected, hits = [-0.5 * a, -1.0 * a, -1.1 * a, -1.28 * a], [0, 0, 0, 1]
        else:  # the loss stops falling below 1 - ε_low
            expected, hits = [-0.8 * a, -1.0 * a, -1.1 * a, -1.5 * a], [1, 0, 0, 0]
        np.testing.assert_allclose(np.asarray(loss)[0], expected, rtol=1e-6)
        assert np.asarray(active)[0].tolist() == [bool(h) for h in hits]


def test_clipped_tokens_have_no_gradient():
    logp = jnp.log(jnp.array([[0.5, 1.0, 1.5]], jnp.float32))

    def total(x):
        return jnp.sum(clipped_token_loss(x, jnp.zeros_like(x), jnp.array([1.0]), 0.2, 0.2)[0])

    grad = np.asarray(jax.grad(total)(logp))[0]
    # d(−ρA)/d log π = −ρA where unclipped; 0 where the clip holds (ρ = 1.5 > 1.2, A > 0)
    np.testing.assert_allclose(grad, [-0.5, -1.0, 0.0], rtol=1e-6)


def test_k3_kl_matches_its_formula_and_is_zero_at_the_reference():
    logp = np.array([-1.0, -2.0, -0.1, -5.0], np.float32)
    ref = np.array([-1.0, -1.5, -0.9, -2.0], np.float32)
    d = ref.astype(np.float64) - logp
    np.testing.assert_allclose(np.asarray(k3_kl(logp, ref)), np.exp(d) - d - 1, rtol=1e-5)
    assert np.asarray(k3_kl(logp, logp)).tolist() == [0.0] * 4
    assert np.all(np.asarray(k3_kl(logp, ref)) >= 0)


def test_aggregations_match_their_formulas():
    _, _, _, mask = fixed_batch()
    loss = np.random.default_rng(1).normal(size=(B, T)).astype(np.float32)
    m = mask.astype(np.float64)
    expected = {
        "token_mean": (loss * m).sum() / m.sum(),
        "sequence_mean": ((loss * m).sum(1) / m.sum(1)).mean(),
        "dr_grpo": (loss * m).sum() / (B * 9),
    }
    for how, value in expected.items():
        num, den = aggregate(jnp.asarray(loss), jnp.asarray(mask), how, 9)
        assert float(num / den) == pytest.approx(value, rel=1e-5), how


def test_token_logps_is_a_log_softmax_gather():
    logits = np.random.default_rng(2).normal(size=(2, 3, 5)).astype(np.float32)
    targets = np.array([[0, 4, 2], [1, 1, -100]])
    got = np.asarray(token_logps(jnp.asarray(logits), jnp.asarray(targets)))
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, np.maximum(targets, 0)[..., None], -1)[..., 0]
    np.testing.assert_allclose(got, picked, rtol=1e-5, atol=1e-6)


def test_temperature_scales_the_logits_of_log_probs_and_entropy():
    logits = np.random.default_rng(3).normal(size=(2, 3, 6)).astype(np.float32)
    targets = np.array([[0, 5, 2], [1, 3, 4]])
    z = logits.astype(np.float64) / 0.7
    log_softmax = z - np.log(np.exp(z).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, targets[..., None], -1)[..., 0]
    got = np.asarray(token_logps(jnp.asarray(logits), jnp.asarray(targets), 0.7))
    np.testing.assert_allclose(got, picked, rtol=1e-5, atol=1e-6)
    entropy = -(np.exp(log_softmax) * log_softmax).sum(-1)
    got = np.asarray(token_entropy(jnp.asarray(logits), 0.7))
    np.testing.assert_allclose(got, entropy, rtol=1e-5, atol=1e-6)


def test_equal_rewards_everywhere_give_zero_loss_and_no_nan():
    logp, old, ref, mask = fixed_batch()
    adv = group_advantages(np.ones(B, np.float32), G)
    config = GRPOConfig(beta=0.0)
    loss, metrics = grpo_loss(config, logp, old, None, adv, mask)
    assert float(loss) == 0.0
    grads = jax.grad(lambda x: grpo_loss(config, x, old, None, adv, mask)[0])(jnp.asarray(logp))
    assert np.all(np.asarray(grads) == 0.0)
    assert float(metrics["clip_fraction"]) == 0.0


def test_config_refuses_bad_values():
    with pytest.raises(ConfigError, match="grpo.loss"):
        GRPOConfig(loss="mean")
    with pytest.raises(ConfigError, match="grpo.advantage"):
        GRPOConfig(advantage="ppo")
    with pytest.raises(ConfigError, match="reward_weights"):
        GRPOConfig(rewards=["a", "b"], reward_weights=[1.0])
    with pytest.raises(ConfigError, match="empty"):
        GRPOConfig(rewards=[])


# --- parity with TRL ----------------------------------------------------------------------


class GRPOTrainerStandIn:
    """The attributes GRPOTrainer._compute_loss reads, so the real method runs unbound without
    building a Trainer: the model's per-token log-probs are the fixed ``logp`` (a leaf that
    keeps its gradient), one process, no gradient accumulation, no vLLM, no entropy bonus."""

    def __init__(self, logp, loss_type, beta, epsilon, epsilon_high, max_completion_length):
        import torch

        identity = lambda x, **_: x  # noqa: E731
        self.logp = logp
        self.model = SimpleNamespace(training=True)
        self.accelerator = SimpleNamespace(gather=identity, reduce=identity)
        self.args = SimpleNamespace(use_bias_correction_kl=False, delta=None)
        self.loss_type, self.beta = loss_type, beta
        self.epsilon_low, self.epsilon_high = epsilon, epsilon_high
        self.max_completion_length = max_completion_length
        self.importance_sampling_level = "token"
        self.top_entropy_quantile = 1.0
        self.off_policy_mask_threshold = None
        self.use_vllm = self.aux_loss_enabled = self._entropy_bonus_enabled = False
        self.vllm_importance_sampling_correction = False
        self.current_gradient_accumulation_steps = 1
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._zero_entropy = torch.zeros_like(logp)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, keep, **_):
        return self.logp, self._zero_entropy, None


# TRL's names for our aggregations: bnpo sums every token of the batch over the mask's sum
TRL_LOSS = {"token_mean": "bnpo", "sequence_mean": "grpo", "dr_grpo": "dr_grpo"}
CASES = [
    (loss, beta, eps, eps_high)
    for loss in TRL_LOSS
    for beta, eps, eps_high in ((0.0, 0.2, 0.2), (0.04, 0.2, 0.28))
]


def trl_advantages(rewards):
    """TRL's group advantages (grpo_trainer.py, ``scale_rewards="group"``): the group's
    nanmean and Bessel-corrected ``nanstd``, then (r − mean) / (std + 1e-4)."""
    import torch
    from trl.trainer.utils import nanstd

    r = torch.tensor(rewards)
    mean = torch.nanmean(r.view(-1, G), dim=1).repeat_interleave(G)
    std = nanstd(r.view(-1, G), dim=1).repeat_interleave(G)
    return (r - mean) / (std + 1e-4)


@trl_parity
def test_group_advantages_match_trl():
    ours = np.asarray(group_advantages(REWARDS, G, "group", 1e-4))
    theirs = trl_advantages(REWARDS).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


@trl_parity
@pytest.mark.parametrize(("loss", "beta", "eps", "eps_high"), CASES)
def test_loss_and_gradient_match_trl(loss, beta, eps, eps_high):
    import torch
    from trl import GRPOTrainer

    logp, old, ref, mask = fixed_batch()
    max_len = T + 2  # Dr. GRPO's constant is the generation limit, not the longest row
    adv = trl_advantages(REWARDS)
    leaf = torch.tensor(logp, requires_grad=True)
    stand_in = GRPOTrainerStandIn(leaf, TRL_LOSS[loss], beta, eps, eps_high, max_len)
    ids = torch.zeros((B, T), dtype=torch.long)
    inputs = {
        "prompt_ids": torch.zeros((B, 2), dtype=torch.long),
        "prompt_mask": torch.ones((B, 2), dtype=torch.long),
        "completion_ids": ids,
        "completion_mask": torch.tensor(mask, dtype=torch.long),
        "advantages": adv,
        "old_per_token_logps": torch.tensor(old),
        "ref_per_token_logps": torch.tensor(ref),
    }
    trl_loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    trl_loss.backward()
    trl_loss = trl_loss.detach()

    config = GRPOConfig(loss=loss, beta=beta, epsilon=eps, epsilon_high=eps_high)
    config.max_new_tokens = max_len
    adv_ours = group_advantages(REWARDS, G, "group", 1e-4)

    def ours(x):
        return grpo_loss(config, x, old, ref, adv_ours, mask)

    (value, metrics), grad = jax.value_and_grad(ours, has_aux=True)(jnp.asarray(logp))
    assert math.isfinite(float(value)) and abs(float(trl_loss)) > 1e-3  # a non-trivial case
    np.testing.assert_allclose(float(value), float(trl_loss), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), leaf.grad.numpy(), rtol=0, atol=1e-6)
    trl_metrics = {k: v[-1] for k, v in stand_in._metrics["train"].items()}
    clip = float(metrics["clip_fraction"])
    assert clip > 0  # the case reaches the clip
    assert clip == pytest.approx(trl_metrics["clip_ratio/region_mean"], abs=1e-6)
    if beta:
        assert float(metrics["kl"]) == pytest.approx(trl_metrics["kl"], abs=1e-6)


@trl_parity
@pytest.mark.parametrize("loss", list(TRL_LOSS))
def test_truncated_importance_sampling_matches_trl(loss):
    """A sampler whose log-probs differ from π_old by up to ±0.5: TRL weights each token's
    clipped term by ``importance_sampling_ratio`` (grpo_trainer.py, ``token_truncate``:
    clamp(exp((old − sampler) · mask), max=cap)) before adding β k3; so do we."""
    import torch
    from trl import GRPOTrainer

    logp, old, ref, mask = fixed_batch()
    sampler = (old + np.random.default_rng(5).uniform(-0.5, 0.5, old.shape)).astype(np.float32)
    cap = 1.5
    ratio = torch.clamp(
        torch.exp((torch.tensor(old) - torch.tensor(sampler)) * torch.tensor(mask)), max=cap
    )
    leaf = torch.tensor(logp, requires_grad=True)
    stand_in = GRPOTrainerStandIn(leaf, TRL_LOSS[loss], 0.04, 0.2, 0.28, T)
    stand_in.use_vllm = stand_in.vllm_importance_sampling_correction = True
    inputs = {
        "prompt_ids": torch.zeros((B, 2), dtype=torch.long),
        "prompt_mask": torch.ones((B, 2), dtype=torch.long),
        "completion_ids": torch.zeros((B, T), dtype=torch.long),
        "completion_mask": torch.tensor(mask, dtype=torch.long),
        "advantages": trl_advantages(REWARDS),
        "old_per_token_logps": torch.tensor(old),
        "ref_per_token_logps": torch.tensor(ref),
        "importance_sampling_ratio": ratio,
    }
    trl_loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    trl_loss.backward()

    config = GRPOConfig(loss=loss, beta=0.04, epsilon=0.2, epsilon_high=0.28, tis_cap=cap)
    config.max_new_tokens = T
    adv = group_advantages(REWARDS, G, "group", 1e-4)
    weights = jnp.minimum(jnp.exp(jnp.asarray(old) - jnp.asarray(sampler)), cap)

    def ours(x):
        return grpo_loss(config, x, old, ref, adv, mask, weights)[0]

    value, grad = jax.value_and_grad(ours)(jnp.asarray(logp))
    assert float(np.max(np.asarray(weights))) == cap  # the cap is reached
    np.testing.assert_allclose(float(value), float(trl_loss.detach()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), leaf.grad.numpy(), rtol=0, atol=1e-6)
