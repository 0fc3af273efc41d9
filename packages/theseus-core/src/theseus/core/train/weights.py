"""Weights from elsewhere (a Hugging Face folder, another run) checked and placed like ours."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from theseus.core.errors import ConfigError


def placed_like(weights: Any, like: nnx.State, source: str) -> nnx.State:
    """``weights`` (same paths and shapes as ``like``) in ``like``'s dtypes and shardings."""
    from theseus.core.train.digest import path_name

    def flat(tree: Any) -> dict[str, Any]:
        return {path_name(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}

    theirs, ours = flat(weights), flat(like)
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected:
        raise ConfigError(
            f"{source}: its parameters do not fit this model (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}): check model.* against that run's config"
        )
    for key, leaf in ours.items():
        if tuple(theirs[key].shape) != tuple(leaf.shape):
            raise ConfigError(
                f"{source}: parameter {key} has shape {tuple(theirs[key].shape)} there but "
                f"{tuple(leaf.shape)} in this model config"
            )
    return jax.tree.map(
        lambda new, old: jax.device_put(new.astype(old.dtype), getattr(old, "sharding", None)),
        weights,
        like,
    )
