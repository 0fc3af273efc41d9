"""The GRPO objective as pure functions: advantages, the clipped ratio, the k3 KL, aggregation.

A step samples G completions o_1..o_G of each prompt q and scores each with a scalar reward
r_i. Per token t of completion i, with π the policy being trained, π_old the policy that
sampled (the same weights before this step's update) and π_ref a frozen reference:

advantage (one number per completion, the same for all its tokens):
    group  Â_i = (r_i − mean_G r) / (std_G r + ε_s)        (Shao et al. 2024, DeepSeekMath)
           std_G with Bessel's correction (÷ (G−1)), as ``torch.std`` and TRL compute it;
           a group whose rewards are all equal gets Â = 0 (0 / ε_s), never NaN.
    rloo   Â_i = r_i − (Σ_j r_j − r_i) / (G − 1)             (Ahmadian et al. 2024)

clipped ratio (PPO, Schulman et al. 2017), ρ = exp(log π − log π_old):
    ℓ_t = −min(ρ Â, clip(ρ, 1 − ε_low, 1 + ε_high) Â)
  ε_high > ε_low is DAPO's "clip higher" (Yu et al. 2025).

KL to the reference, Schulman's k3 estimator (unbiased, always ≥ 0), added with weight β:
    k3_t = exp(log π_ref − log π) − (log π_ref − log π) − 1;   ℓ_t += β k3_t

truncated importance sampling (``tis_cap`` C > 0), for a sampler whose numerics differ from
the trainer's: the clipped term of each token is weighted by min(π_old / π_sampler, C)
(Yao et al. 2025; TRL's ``vllm_importance_sampling_correction``), before β k3 is added.

aggregation of ℓ over the completion tokens (mask m_it):
    token_mean     Σ_it m ℓ / Σ_it m              (TRL's ``bnpo``; DAPO's token-level mean)
    sequence_mean  mean_i (Σ_t m ℓ / Σ_t m)       (the GRPO paper; TRL's ``grpo``)
    dr_grpo        Σ_it m ℓ / (B · L_max)         (Dr. GRPO, Liu et al. 2025: a constant)

Each aggregation is returned as a (numerator, denominator) pair whose ratio is the loss, so
a step that splits the batch into micro-batches and adds both parts up gets the exact loss of
the whole batch. Everything is float32 and jit-able; the variant is chosen in Python.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def group_advantages(rewards_B, generations: int, kind: str = "group", scale_eps: float = 1e-4):
    """Per-completion advantages from rewards laid out as consecutive groups of G rows."""
    r_PxG = jnp.asarray(rewards_B, jnp.float32).reshape(-1, generations)
    if kind == "group":
        mean = jnp.mean(r_PxG, axis=1, keepdims=True)
        std = jnp.std(r_PxG, axis=1, keepdims=True, ddof=1)
        advantages = (r_PxG - mean) / (std + scale_eps)
    elif kind == "rloo":
        others = (jnp.sum(r_PxG, axis=1, keepdims=True) - r_PxG) / (generations - 1)
        advantages = r_PxG - others
    else:  # GRPOConfig refuses other names; this guards hand-built calls
        raise ValueError(f"unknown advantage estimator {kind!r}")
    return advantages.reshape(-1)


def token_entropy(logits_BxTxV, temperature: float = 1.0):
    """Entropy of softmax(logits / temperature) per position: logsumexp(z) − Σ p z."""
    z = logits_BxTxV.astype(jnp.float32) / temperature
    return jax.nn.logsumexp(z, axis=-1) - jnp.sum(jax.nn.softmax(z, axis=-1) * z, axis=-1)


def k3_kl(logp_BxT, ref_logp_BxT):
    """Schulman's k3 estimate of KL(π ‖ π_ref) per token: e^d − d − 1 with d = ref − π."""
    d = ref_logp_BxT - logp_BxT
    return jnp.exp(d) - d - 1.0


def clipped_token_loss(logp_BxT, old_logp_BxT, advantages_B, epsilon: float, epsilon_high: float):
    """−min(ρÂ, clip(ρ)Â) per token, and where the clip is active (ρ outside on Â's side)."""
    ratio = jnp.exp(logp_BxT - old_logp_BxT)
    adv = advantages_B[:, None]
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon_high)
    loss = -jnp.minimum(ratio * adv, clipped * adv)
    active = ((ratio < 1.0 - epsilon) & (adv < 0)) | ((ratio > 1.0 + epsilon_high) & (adv > 0))
    return loss, active


def aggregate(loss_BxT, mask_BxT, how: str, max_new_tokens: int):
    """``(numerator, denominator)`` of the loss under aggregation ``how``."""
    mask = mask_BxT.astype(jnp.float32)
    rows = jnp.asarray(loss_BxT.shape[0], jnp.float32)
    if how == "token_mean":
        return jnp.sum(loss_BxT * mask), jnp.sum(mask)
    if how == "sequence_mean":
        per_row = jnp.sum(loss_BxT * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
        return jnp.sum(per_row), rows
    if how == "dr_grpo":
        return jnp.sum(loss_BxT * mask), rows * max_new_tokens
    raise ValueError(f"unknown loss aggregation {how!r}")


def grpo_terms(
    config, logp_BxT, old_logp_BxT, ref_logp_BxT, advantages_B, mask_BxT, weights_BxT=None
):
    """The loss as ``(numerator, denominator)`` and metric sums ``{name: (sum, count)}``.

    ``config`` is a :class:`~theseus.core.recipes.grpo_config.GRPOConfig`;
    ``ref_logp_BxT`` is ignored (may be None) when ``config.beta == 0``. ``weights_BxT``
    (truncated importance sampling) multiply the clipped term per token, before the KL term
    is added, as TRL weights it.
    """
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    logp, old = f32(logp_BxT), f32(old_logp_BxT)
    mask = f32(mask_BxT)
    loss_BxT, active = clipped_token_loss(
        logp, old, f32(advantages_B), config.epsilon, config.epsilon_high
    )
    if weights_BxT is not None:
        loss_BxT = loss_BxT * f32(weights_BxT)
    tokens = jnp.sum(mask)
    metrics = {"clip_fraction": (jnp.sum(active * mask), tokens)}
    if config.beta > 0:
        kl = k3_kl(logp, f32(ref_logp_BxT))
        loss_BxT = loss_BxT + config.beta * kl
        metrics["kl"] = (jnp.sum(kl * mask), tokens)
    numerator, denominator = aggregate(loss_BxT, mask, config.loss, config.max_new_tokens)
    metrics = jax.tree.map(jax.lax.stop_gradient, metrics)
    return numerator, denominator, metrics


def grpo_loss(
    config, logp_BxT, old_logp_BxT, ref_logp_BxT, advantages_B, mask_BxT, weights_BxT=None
):
    """The scalar loss of one batch and its metrics as means (see :func:`grpo_terms`)."""
    numerator, denominator, sums = grpo_terms(
        config, logp_BxT, old_logp_BxT, ref_logp_BxT, advantages_B, mask_BxT, weights_BxT
    )
    metrics = {name: s / jnp.maximum(n, 1.0) for name, (s, n) in sums.items()}
    return numerator / jnp.maximum(denominator, 1.0), metrics
