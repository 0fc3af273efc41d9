"""Preference-optimisation losses on sequence log-probabilities: DPO, IPO and SimPO.

A preference pair is a prompt with a *chosen* and a *rejected* completion. The policy (and,
except for SimPO, a frozen reference model) scores each completion by its summed token
log-probability (:func:`sequence_logps`); :func:`preference_loss` turns the four [P] score
arrays of P pairs into a scalar loss and a few metrics. Everything is float32 and jit-able;
``config`` is static (the loss variant is chosen in Python, never on traced values).

With Δπ = log π(y_c) − log π(y_r) and Δref the same under the reference model:

sigmoid, DPO (Rafailov et al. 2023, eq. 7), with cDPO label smoothing ε:
    z = β (Δπ − Δref);   loss = −(1−ε) log σ(z) − ε log σ(−z)

ipo, IPO (Azar et al. 2023, eq. 17), on *per-token average* log-ratios:
    h = (log π(y_c) − log ref(y_c)) / |y_c| − (log π(y_r) − log ref(y_r)) / |y_r|
    loss = (h − 1/(2β))²
  The paper writes h with sequence log-likelihoods, whose squared loss grows with the
  completion length; TRL divides by the token counts and says the IPO authors confirmed that
  the paper's results used this normalised form. We follow TRL. With one-token completions
  the two agree.

simpo, SimPO (Meng et al. 2024, eq. 6), reference-free, length-normalised:
    z = β log π(y_c)/|y_c| − β log π(y_r)/|y_r| − γ;   loss = −(1−ε) log σ(z) − ε log σ(−z)
  γ is the margin itself, as in eq. 6 and TRL's ``simpo_gamma``; the paper's tables list
  γ/β, so multiply by β when copying their settings.

log σ is ``jax.nn.log_sigmoid`` (−softplus(−z)): finite for any finite z, however large.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from theseus.core.recipes.preference_config import PreferenceConfig


def sequence_logps(logits_BxTxV, targets_BxT, mask_BxT):
    """Summed log-probability of ``targets`` under ``logits`` per row, and the token count.

    ``targets_BxT[b, t]`` is the token that ``logits_BxTxV[b, t]`` predicts (already shifted:
    the next input token), and ``mask_BxT`` is true on the completion tokens that count. The
    log-softmax runs in float32 whatever the logits' dtype. Returns ``(logps_B, tokens_B)``,
    both float32.
    """
    logits = logits_BxTxV.astype(jnp.float32)
    mask = mask_BxT.astype(bool)
    targets = jnp.where(mask, targets_BxT, 0)  # padding may hold -100 or any id
    # log_softmax(logits)[target] = logits[target] - logsumexp(logits), without a BxTxV copy
    picked_BxT = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    logp_BxT = picked_BxT - jax.nn.logsumexp(logits, axis=-1)
    logps_B = jnp.sum(jnp.where(mask, logp_BxT, 0.0), axis=-1)
    return logps_B, jnp.sum(mask, axis=-1).astype(jnp.float32)


def _smoothed_logistic(z, epsilon):
    """−(1−ε) log σ(z) − ε log σ(−z): the logistic loss when the label is flipped w.p. ε."""
    return -(1.0 - epsilon) * jax.nn.log_sigmoid(z) - epsilon * jax.nn.log_sigmoid(-z)


def preference_loss(
    config: PreferenceConfig,
    policy_chosen,
    policy_rejected,
    reference_chosen,
    reference_rejected,
    chosen_tokens,
    rejected_tokens,
):
    """The mean loss over P pairs and a dict of scalar metrics, from [P] sequence log-probs.

    ``reference_*`` are ignored by ``simpo``; ``*_tokens`` (completion lengths) are used by
    ``ipo`` and ``simpo``. Metrics: ``rewards/chosen``, ``rewards/rejected`` (the implicit
    rewards β·(log π − log ref), for simpo β·log π/|y|), ``rewards/margin``,
    ``rewards/accuracy`` (fraction of pairs whose chosen reward is strictly higher),
    ``logps/chosen`` and ``logps/rejected`` (policy sums).
    """
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    pi_c, pi_r = f32(policy_chosen), f32(policy_rejected)
    ref_c, ref_r = f32(reference_chosen), f32(reference_rejected)
    n_c = jnp.maximum(f32(chosen_tokens), 1.0)  # an empty completion must not divide by 0
    n_r = jnp.maximum(f32(rejected_tokens), 1.0)
    beta, epsilon = config.beta, config.label_smoothing

    if config.loss == "sigmoid":
        reward_c, reward_r = beta * (pi_c - ref_c), beta * (pi_r - ref_r)
        # β(Δπ − Δref), grouped as written in the paper
        losses_P = _smoothed_logistic(beta * ((pi_c - pi_r) - (ref_c - ref_r)), epsilon)
    elif config.loss == "ipo":
        reward_c, reward_r = beta * (pi_c - ref_c), beta * (pi_r - ref_r)
        h = (pi_c - ref_c) / n_c - (pi_r - ref_r) / n_r
        losses_P = jnp.square(h - 1.0 / (2.0 * beta))
    elif config.loss == "simpo":
        reward_c, reward_r = beta * pi_c / n_c, beta * pi_r / n_r
        losses_P = _smoothed_logistic(reward_c - reward_r - config.simpo_gamma, epsilon)
    else:  # PreferenceConfig refuses other names; this guards hand-built objects
        raise ValueError(f"unknown preference loss {config.loss!r}")

    metrics = {
        "rewards/chosen": jnp.mean(reward_c),
        "rewards/rejected": jnp.mean(reward_r),
        "rewards/margin": jnp.mean(reward_c - reward_r),
        "rewards/accuracy": jnp.mean((reward_c > reward_r).astype(jnp.float32)),
        "logps/chosen": jnp.mean(pi_c),
        "logps/rejected": jnp.mean(pi_r),
    }
    return jnp.mean(losses_P), jax.tree.map(jax.lax.stop_gradient, metrics)
