"""Start training from Hugging Face weights (imported by the plugin that answers
``theseus_load_hf_model``, e.g. theseus-models)."""

from __future__ import annotations

from typing import Any

import jax
from theseus.core.errors import ConfigError


def _flat(tree: Any) -> dict[str, Any]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): leaf for path, leaf in leaves}


def params_from_hf(registries: Any, directory: str, like: Any) -> Any:
    """The HF checkpoint's parameters, checked against and placed like ``like``."""
    from flax import nnx

    model = registries.hook.theseus_load_hf_model(directory=directory, dtype="")
    if model is None:
        raise ConfigError(
            f"init.hf: no installed plugin imports Hugging Face weights from {directory} "
            "(pip install theseus-models)"
        )
    _, params, _ = nnx.split(model, nnx.Param, ...)
    theirs, ours = _flat(params), _flat(like)
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected:
        raise ConfigError(
            f"init.hf: {directory} does not fit the model config: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]} (check model.* against its config.json)"
        )
    for key, leaf in ours.items():
        if tuple(theirs[key].shape) != tuple(leaf.shape):
            raise ConfigError(
                f"init.hf: parameter {key} has shape {tuple(theirs[key].shape)} in {directory} "
                f"but {tuple(leaf.shape)} in the model config"
            )
    return jax.tree.map(
        lambda new, old: jax.device_put(new.astype(old.dtype), getattr(old, "sharding", None)),
        params,
        like,
    )
