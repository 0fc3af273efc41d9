"""Built-in optimizers: each ``build(config, learning_rate) -> optax.GradientTransformation``.

``learning_rate`` is a schedule (step -> rate). Weight decay applies only to parameters with
two or more dimensions (matrices and embeddings): norms' gains and biases are excluded.
Gradient clipping by global norm comes first when ``grad_clip > 0``.
"""

from __future__ import annotations

from typing import Any

import jax
import optax


def decay_mask(params: Any) -> Any:
    """True for leaves that get weight decay: arrays with at least two dimensions."""
    return jax.tree.map(lambda p: getattr(p, "ndim", 0) >= 2, params)


def with_clipping(
    config: Any, transform: optax.GradientTransformation
) -> optax.GradientTransformation:
    if config.grad_clip and config.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(config.grad_clip), transform)
    return transform


def adamw(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    return with_clipping(
        config,
        optax.adamw(
            learning_rate,
            b1=config.b1,
            b2=config.b2,
            eps=config.eps,
            weight_decay=config.weight_decay,
            mask=decay_mask,
        ),
    )


def lion(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    return with_clipping(
        config,
        optax.lion(
            learning_rate,
            b1=config.b1,
            b2=config.b2,
            weight_decay=config.weight_decay,
            mask=decay_mask,
        ),
    )


def sgd(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    momentum = config.momentum if config.momentum > 0 else None
    parts = []
    if config.weight_decay:
        parts.append(optax.add_decayed_weights(config.weight_decay, mask=decay_mask))
    parts.append(optax.sgd(learning_rate, momentum=momentum, nesterov=config.nesterov))
    return with_clipping(config, optax.chain(*parts))


def adafactor(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    return with_clipping(
        config,
        optax.adafactor(
            learning_rate,
            decay_rate=config.decay_rate,
            clipping_threshold=config.clipping_threshold,
            weight_decay_rate=config.weight_decay or None,
            weight_decay_mask=decay_mask,
        ),
    )


def muon(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    contrib = getattr(optax, "contrib", None)
    muon_fn = getattr(contrib, "muon", None)
    if muon_fn is None:  # pragma: no cover - depends on the optax version
        from theseus.core.errors import PluginError

        raise PluginError(
            f"optimizer 'muon' needs optax.contrib.muon (optax {optax.__version__} lacks it)"
        )
    ratio = config.adam_learning_rate / config.learning_rate

    def adam_rate(step: Any) -> Any:
        return learning_rate(step) * ratio

    return with_clipping(
        config,
        muon_fn(
            learning_rate,
            ns_steps=config.ns_steps,
            beta=config.beta,
            weight_decay=config.weight_decay,
            weight_decay_mask=decay_mask,
            adam_learning_rate=adam_rate,
        ),
    )
