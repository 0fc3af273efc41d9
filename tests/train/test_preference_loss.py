"""Preference losses (DPO, IPO, SimPO) against their published formulas and against TRL.

The formulas are recomputed here in numpy float64 on fixed log-probs; the JAX losses run in
float32, hence rtol 1e-6. The parity tests run TRL's own loss code (DPOTrainer._compute_loss,
CPOTrainer.cpo_loss and CPOTrainer.get_batch_logps) where trl is installed.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from theseus.core.errors import ConfigError
from theseus.core.recipes.preference import preference_loss, sequence_logps
from theseus.core.recipes.preference_config import PreferenceConfig

from tests.train.conftest import trl_parity

# Six pairs. Pair 3 and 4 have DPO logits of about -200 and +200 at beta=0.1, where a naive
# log(sigmoid(z)) gives -inf (or log 1 = 0 with the gradient lost) in float32.
POLICY_C = np.array([-12.5, -40.0, -3.0, -2000.0, -5.0, -800.0])
POLICY_R = np.array([-14.0, -38.0, -3.0, -5.0, -2005.0, -790.0])
REF_C = np.array([-13.0, -41.5, -2.5, -1000.0, -6.0, -805.0])
REF_R = np.array([-13.5, -37.0, -3.5, -1000.0, -7.0, -800.0])
TOKENS_C = np.array([5.0, 17.0, 1.0, 300.0, 2.0, 250.0])
TOKENS_R = np.array([6.0, 12.0, 1.0, 3.0, 310.0, 260.0])
PAIRS = (POLICY_C, POLICY_R, REF_C, REF_R, TOKENS_C, TOKENS_R)
P = len(POLICY_C)

VARIANTS = [
    dict(loss="sigmoid", beta=0.1),
    dict(loss="sigmoid", beta=0.1, label_smoothing=0.1),
    dict(loss="ipo", beta=0.1),
    dict(loss="ipo", beta=0.5),
    dict(loss="simpo", beta=2.0, simpo_gamma=0.5),
    dict(loss="simpo", beta=2.0, simpo_gamma=1.0, label_smoothing=0.2),
]
IDS = [",".join(f"{k}={v}" for k, v in variant.items()) for variant in VARIANTS]


# --- the published formulas, float64 ------------------------------------------------------


def log_sigmoid64(z):
    return -np.logaddexp(0.0, -z)


def sigmoid64(z):
    return np.exp(log_sigmoid64(z))


def smoothed64(z, eps):
    """cDPO: −(1−ε) log σ(z) − ε log σ(−z)."""
    return -(1 - eps) * log_sigmoid64(z) - eps * log_sigmoid64(-z)


def reference_terms(variant, pi_c, pi_r, ref_c, ref_r, n_c, n_r):
    """Per-pair (loss, the variable the loss is a function of, chosen and rejected rewards)."""
    beta = variant["beta"]
    eps = variant.get("label_smoothing", 0.0)
    if variant["loss"] == "sigmoid":  # Rafailov et al. 2023, eq. 7
        z = beta * ((pi_c - pi_r) - (ref_c - ref_r))
        return smoothed64(z, eps), z, beta * (pi_c - ref_c), beta * (pi_r - ref_r)
    if variant["loss"] == "ipo":  # Azar et al. 2023, eq. 17, per-token log-ratios (as TRL)
        h = (pi_c - ref_c) / n_c - (pi_r - ref_r) / n_r
        return (h - 1 / (2 * beta)) ** 2, h, beta * (pi_c - ref_c), beta * (pi_r - ref_r)
    # Meng et al. 2024, eq. 6
    r_c, r_r = beta * pi_c / n_c, beta * pi_r / n_r
    z = r_c - r_r - variant["simpo_gamma"]
    return smoothed64(z, eps), z, r_c, r_r


def per_pair_losses(config, *arrays):
    """The loss of each pair alone (a batch of one), vmapped over the pairs."""
    one = lambda *a: preference_loss(config, *(x[None] for x in a))[0]  # noqa: E731
    return np.asarray(jax.vmap(one)(*(jnp.asarray(a, jnp.float32) for a in arrays)))


# --- the formulas --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_loss_matches_the_published_formula(variant):
    config = PreferenceConfig(**variant)
    expected, _, _, _ = reference_terms(variant, *PAIRS)
    loss, _ = preference_loss(config, *(jnp.asarray(a, jnp.float32) for a in PAIRS))
    assert loss.dtype == jnp.float32 and loss.shape == ()
    np.testing.assert_allclose(float(loss), expected.mean(), rtol=1e-6)
    np.testing.assert_allclose(per_pair_losses(config, *PAIRS), expected, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_metrics_match_the_implicit_rewards(variant):
    _, _, reward_c, reward_r = reference_terms(variant, *PAIRS)
    _, metrics = preference_loss(PreferenceConfig(**variant), *PAIRS)
    expected = {
        "rewards/chosen": reward_c.mean(),
        "rewards/rejected": reward_r.mean(),
        "rewards/margin": (reward_c - reward_r).mean(),
        "rewards/accuracy": (reward_c > reward_r).mean(),
        "logps/chosen": POLICY_C.mean(),
        "logps/rejected": POLICY_R.mean(),
    }
    assert set(metrics) == set(expected)
    # float32 means of terms up to ~200 that nearly cancel: 1e-6 of the largest term
    scale = np.abs(np.concatenate([reward_c, reward_r, POLICY_C, POLICY_R])).max()
    for key, value in expected.items():
        assert metrics[key].dtype == jnp.float32
        np.testing.assert_allclose(float(metrics[key]), value, atol=1e-6 * scale, err_msg=key)


@pytest.mark.parametrize("loss", ["sigmoid", "simpo"])
def test_huge_margins_stay_finite(loss):
    """|z| = 200 and 1e4: −log σ(z) is ~0 on the right side and ~|z| on the wrong side."""
    config = PreferenceConfig(loss=loss, beta=1.0, simpo_gamma=0.0)
    z = np.array([200.0, -200.0, 1e4, -1e4])
    zeros, ones = np.zeros_like(z), np.ones_like(z)
    arrays = (z, zeros, zeros, zeros, ones, ones)  # z = π_c, everything else 0 (or 1 token)
    losses = per_pair_losses(config, *arrays)
    np.testing.assert_allclose(losses, smoothed64(z, 0.0), rtol=1e-6, atol=1e-30)
    grads = jax.vmap(jax.grad(lambda *a: preference_loss(config, *(x[None] for x in a))[0]))(
        *(jnp.asarray(a, jnp.float32) for a in arrays)
    )
    np.testing.assert_allclose(grads, -sigmoid64(-z), rtol=1e-6, atol=1e-30)
    # what a naive log(sigmoid(z)) gives in float32 on the wrong side: -inf
    assert jnp.isneginf(jnp.log(jax.nn.sigmoid(jnp.float32(-200.0))))


def test_ipo_is_finite_on_huge_margins():
    big = np.array([1e4, -1e4])
    losses = per_pair_losses(
        PreferenceConfig(loss="ipo"), big, -big, np.zeros(2), np.zeros(2), np.ones(2), np.ones(2)
    )
    np.testing.assert_allclose(losses, (2 * big - 5.0) ** 2, rtol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_gradients_match_the_analytic_derivative(variant):
    """d loss/d (π_c, π_r, ref_c, ref_r), the mean over P pairs, by hand."""
    beta, eps = variant["beta"], variant.get("label_smoothing", 0.0)
    _, x, _, _ = reference_terms(variant, *PAIRS)
    if variant["loss"] == "ipo":
        d = 2 * (x - 1 / (2 * beta)) / P  # d loss/d h
        expected = (d / TOKENS_C, -d / TOKENS_R, -d / TOKENS_C, d / TOKENS_R)
    else:
        d = (-(1 - eps) * sigmoid64(-x) + eps * sigmoid64(x)) / P  # d loss/d z
        if variant["loss"] == "sigmoid":
            expected = (beta * d, -beta * d, -beta * d, beta * d)
        else:  # simpo: no reference terms
            zero = np.zeros(P)
            expected = (beta * d / TOKENS_C, -beta * d / TOKENS_R, zero, zero)
    grad = jax.grad(lambda *a: preference_loss(PreferenceConfig(**variant), *a)[0], (0, 1, 2, 3))
    got = grad(*(jnp.asarray(a, jnp.float32) for a in PAIRS))
    for name, g, e in zip(["pi_c", "pi_r", "ref_c", "ref_r"], got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-6, atol=1e-30, err_msg=name)


def test_dpo_at_the_reference_is_log_2_with_no_accuracy():
    same = jnp.asarray(POLICY_C, jnp.float32)
    loss, metrics = preference_loss(PreferenceConfig(), same, same, same, same, *PAIRS[4:])
    np.testing.assert_allclose(float(loss), np.log(2), rtol=1e-6)
    assert float(metrics["rewards/accuracy"]) == 0.0  # ties do not count (as TRL)


@pytest.mark.parametrize("variant", VARIANTS[::2], ids=IDS[::2])
def test_jit_matches_eager(variant):
    config = PreferenceConfig(**variant)
    arrays = [jnp.asarray(a, jnp.float32) for a in PAIRS]
    eager = preference_loss(config, *arrays)
    jitted = jax.jit(functools.partial(preference_loss, config))(*arrays)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), eager, jitted)


def test_config_refuses_bad_values():
    bad = [
        (dict(loss="foo"), "dpo.loss='foo': expected one of sigmoid, ipo, simpo"),
        (dict(beta=0.0), "dpo.beta=0.0"),
        (dict(beta=float("nan")), "dpo.beta=nan"),
        (dict(label_smoothing=0.5), "dpo.label_smoothing=0.5"),
        (dict(label_smoothing=-0.1), "dpo.label_smoothing=-0.1"),
        (dict(loss="ipo", label_smoothing=0.1), "not ipo"),
        (dict(simpo_gamma=float("inf")), "dpo.simpo_gamma=inf"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            PreferenceConfig(**kwargs)
    assert PreferenceConfig().loss == "sigmoid" and PreferenceConfig().beta == 0.1


# --- sequence log-probs --------------------------------------------------------------------


def numpy_sequence_logps(logits, targets, mask):
    logits = logits.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, np.where(mask, targets, 0)[..., None], -1)[..., 0]
    return (picked * mask).sum(-1), mask.sum(-1).astype(np.float64)


def sequence_inputs(seed=0, B=4, T=9, V=13):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 4.0, (B, T, V)).astype(np.float32)
    targets = rng.integers(0, V, (B, T))
    mask = np.ones((B, T), bool)
    mask[0, :3] = False  # a prompt
    mask[1, 6:] = False  # padding
    mask[2] = False  # nothing to score
    targets[~mask] = -100  # what padding often holds
    return logits, targets, mask


def test_sequence_logps_is_a_masked_log_softmax_gather():
    logits, targets, mask = sequence_inputs()
    logps, tokens = sequence_logps(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(mask))
    expected_logps, expected_tokens = numpy_sequence_logps(logits, targets, mask)
    assert logps.dtype == tokens.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(logps), expected_logps, rtol=1e-6, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(tokens), expected_tokens)
    assert float(logps[2]) == 0.0 and float(tokens[2]) == 0.0


def test_sequence_logps_of_bfloat16_logits_runs_in_float32():
    logits, targets, mask = sequence_inputs(seed=1)
    low = jnp.asarray(logits, jnp.bfloat16)
    logps, _ = sequence_logps(low, jnp.asarray(targets), jnp.asarray(mask))
    expected, _ = numpy_sequence_logps(np.asarray(low.astype(jnp.float32)), targets, mask)
    assert logps.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(logps), expected, rtol=1e-6, atol=1e-5)


def test_sequence_logps_gradient_is_onehot_minus_softmax():
    logits, targets, mask = sequence_inputs(seed=2)
    grad = jax.grad(lambda x: sequence_logps(x, jnp.asarray(targets), jnp.asarray(mask))[0].sum())
    got = np.asarray(grad(jnp.asarray(logits)))
    softmax = np.exp(logits - logits.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    onehot = np.eye(logits.shape[-1])[np.where(mask, targets, 0)]
    np.testing.assert_allclose(got, (onehot - softmax) * mask[..., None], atol=1e-6)


# --- parity with TRL -------------------------------------------------------------------------


class DPOTrainerStandIn:
    """The attributes DPOTrainer._compute_loss reads, so the real method runs unbound without
    building a Trainer (datasets, tokenizer, accelerate state): one process, no gathering."""

    def __init__(self, model, ref_model, loss_type, beta, label_smoothing=0.0):
        import torch

        identity = lambda x: x  # noqa: E731
        self.model, self.ref_model = model, ref_model
        self.accelerator = SimpleNamespace(
            device=torch.device("cpu"),
            gather=identity,
            gather_for_metrics=identity,
            unwrap_model=identity,
        )
        self.args = SimpleNamespace(gradient_checkpointing_kwargs=None)
        self.loss_types, self.loss_weights = [loss_type], [1.0]
        self.beta, self.label_smoothing = beta, label_smoothing
        self.f_divergence_type, self.ld_alpha = "reverse_kl", None
        self.precompute_ref_logps = self.aux_loss_enabled = self.use_weighting = False
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._total_train_tokens, self._tp_size = 0, 1


@pytest.fixture(scope="module")
def trl_batch():
    """Two tiny random GPT-2s (policy, reference) with TRL's fused LM head, and a batch of
    P pairs laid out as TRL's collator does: [chosen rows; rejected rows], prompt then
    completion, right padding."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl.trainer.utils import add_fused_lm_head

    vocab, pairs, length = 29, 4, 12
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=16,
            n_embd=16,
            n_layer=1,
            n_head=2,
            bos_token_id=0,
            eos_token_id=0,
        )
        model = GPT2LMHeadModel(config).eval()
        with torch.no_grad():  # sharper distributions: log-ratios of several nats
            model.transformer.wte.weight.mul_(30.0)
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
        models.append(model)
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(0, vocab, (2 * pairs, length), generator=generator)
    prompt = [2, 3, 4, 2, 5, 3, 2, 4]  # per row, then completion until its end
    end = [12, 10, 9, 12, 7, 12, 11, 8]
    completion_mask = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for row in range(2 * pairs):
        completion_mask[row, prompt[row] : end[row]] = 1
        attention_mask[row, : end[row]] = 1
    inputs = dict(
        input_ids=input_ids, attention_mask=attention_mask, completion_mask=completion_mask
    )

    def ours(model):
        """theseus' sequence_logps on the same model's logits (plain forward)."""
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.numpy()
        ids, mask = input_ids.numpy(), completion_mask.numpy()
        logps, tokens = sequence_logps(logits[:, :-1], ids[:, 1:], mask[:, 1:])
        return np.asarray(logps), np.asarray(tokens), logits

    return SimpleNamespace(models=models, inputs=inputs, pairs=pairs, ours=ours)


def split(x, pairs):
    return x[:pairs], x[pairs:]


@trl_parity
def test_sequence_logps_matches_trl(trl_batch):
    import torch
    from trl.experimental.cpo import CPOTrainer

    logps, tokens, logits = trl_batch.ours(trl_batch.models[0])
    inputs = trl_batch.inputs
    labels = inputs["input_ids"].masked_fill(inputs["completion_mask"] == 0, -100)
    for average, expected in [(False, logps), (True, logps / tokens)]:
        theirs = CPOTrainer.get_batch_logps(torch.from_numpy(logits), labels, average)
        np.testing.assert_allclose(expected, theirs.numpy(), rtol=1e-5)


@trl_parity
@pytest.mark.parametrize("loss_type,beta", [("sigmoid", 0.1), ("sigmoid", 0.5), ("ipo", 0.1)])
def test_dpo_and_ipo_match_trl(trl_batch, loss_type, beta):
    """TRL's DPOTrainer._compute_loss (its own log-probs from its fused LM head, reference
    forward, loss and metrics) against ours on the same two models and batch."""
    import torch
    from trl import DPOTrainer

    policy, reference = trl_batch.models
    stand_in = DPOTrainerStandIn(policy, reference, loss_type, beta)
    with torch.no_grad():
        trl_loss = DPOTrainer._compute_loss(stand_in, policy, trl_batch.inputs, False)
    trl_metrics = {k: v[-1] for k, v in stand_in._metrics["eval"].items()}

    pi, tokens, _ = trl_batch.ours(policy)
    ref, _, _ = trl_batch.ours(reference)
    config = PreferenceConfig(loss=loss_type, beta=beta)
    loss, metrics = preference_loss(
        config,
        *split(pi, trl_batch.pairs),
        *split(ref, trl_batch.pairs),
        *split(tokens, trl_batch.pairs),
    )
    assert 0 < float(metrics["rewards/accuracy"]) < 1  # some pairs on each side of the margin
    np.testing.assert_allclose(float(loss), trl_loss.item(), rtol=1e-5)
    names = {"rewards/accuracy": "rewards/accuracies", "rewards/margin": "rewards/margins"}
    for key, value in metrics.items():
        np.testing.assert_allclose(
            float(value), trl_metrics[names.get(key, key)], rtol=1e-5, atol=1e-6, err_msg=key
        )


@trl_parity
def test_label_smoothing_matches_trl_cdpo(trl_batch):
    """TRL 1.16's DPO 'sigmoid' loss ignores ε; the same cDPO expression survives in its
    'aot' loss, which on a batch of one pair (sorting one value changes nothing) is
    −(1−ε) log σ(βΔ) − ε log σ(−βΔ). Ours, pair by pair."""
    import torch
    from trl import DPOTrainer

    policy, reference = trl_batch.models
    pi, _, _ = trl_batch.ours(policy)
    ref, _, _ = trl_batch.ours(reference)
    n = trl_batch.pairs
    for pair in range(n):
        rows = [pair, n + pair]
        one = {k: v[rows] for k, v in trl_batch.inputs.items()}
        stand_in = DPOTrainerStandIn(policy, reference, "aot", 0.1, label_smoothing=0.2)
        with torch.no_grad():
            trl_loss = DPOTrainer._compute_loss(stand_in, policy, one, False).item()
        loss, _ = preference_loss(
            PreferenceConfig(beta=0.1, label_smoothing=0.2),
            pi[pair],
            pi[n + pair],
            ref[pair],
            ref[n + pair],
            1.0,
            1.0,
        )
        np.testing.assert_allclose(float(loss), trl_loss, rtol=1e-5)


@trl_parity
@pytest.mark.parametrize("gamma,eps", [(0.5, 0.0), (1.0, 0.2)])
def test_simpo_matches_trl(trl_batch, gamma, eps):
    """TRL's CPOTrainer.cpo_loss with loss_type='simpo' takes the per-token average log-probs
    (as its get_batch_logps(average_log_prob=True) gives for simpo); loss and gradients."""
    import torch
    from trl.experimental.cpo import CPOTrainer

    beta = 2.0
    pi, tokens, _ = trl_batch.ours(trl_batch.models[0])
    (pi_c, pi_r), (n_c, n_r) = split(pi, trl_batch.pairs), split(tokens, trl_batch.pairs)
    stand_in = SimpleNamespace(
        alpha=0.0,
        beta=beta,
        label_smoothing=eps,
        loss_type="simpo",
        simpo_gamma=gamma,
        accelerator=SimpleNamespace(device=torch.device("cpu")),
    )
    avg_c = torch.tensor(pi_c / n_c, requires_grad=True)
    avg_r = torch.tensor(pi_r / n_r, requires_grad=True)
    losses, chosen_rewards, rejected_rewards = CPOTrainer.cpo_loss(stand_in, avg_c, avg_r)
    losses.mean().backward()

    config = PreferenceConfig(loss="simpo", beta=beta, simpo_gamma=gamma, label_smoothing=eps)

    def ours(pi_c, pi_r):
        return preference_loss(config, pi_c, pi_r, 0.0 * pi_c, 0.0 * pi_r, n_c, n_r)

    (loss, metrics), grads = jax.value_and_grad(ours, (0, 1), has_aux=True)(pi_c, pi_r)
    np.testing.assert_allclose(float(loss), losses.mean().item(), rtol=1e-5)
    np.testing.assert_allclose(metrics["rewards/chosen"], chosen_rewards.mean().item(), rtol=1e-5)
    np.testing.assert_allclose(
        metrics["rewards/rejected"], rejected_rewards.mean().item(), rtol=1e-5
    )
    # d/d(sum) = d/d(average) / tokens
    np.testing.assert_allclose(grads[0], avg_c.grad.numpy() / n_c, rtol=1e-5)
    np.testing.assert_allclose(grads[1], avg_r.grad.numpy() / n_r, rtol=1e-5)
