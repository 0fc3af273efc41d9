"""Build the pieces a trainer needs from config nodes, through the plugin registries."""

from __future__ import annotations

import dataclasses
from typing import Any

from theseus.core.errors import ConfigError


def component_config(registries: Any, kind: str, node: Any, **overrides: Any) -> Any:
    """An instance of the chosen component's own config dataclass from its config group."""
    component = registries.component(kind).get(node.name)
    names = {f.name for f in dataclasses.fields(component.config)}
    values = {k: node[k] for k in node.keys() if k in names}
    values.update(overrides)
    return component.config(**values)


def build_model(
    registries: Any, model_node: Any, vocab_size: int, seq_len: int, key: Any, dtype: str = ""
) -> Any:
    """The model named by ``model.name`` with the data's vocabulary, initialised from ``key``."""
    from flax import nnx

    configured = int(model_node.vocab_size)
    if configured and configured != vocab_size:
        raise ConfigError(
            f"model.vocab_size={configured} disagrees with the tokenizer's vocabulary of "
            f"{vocab_size}; leave model.vocab_size=0 to take it from the data"
        )
    if seq_len > int(model_node.max_seq_len):
        raise ConfigError(
            f"training.seq_len={seq_len} is longer than model.max_seq_len={model_node.max_seq_len}"
        )
    extra = {"vocab_size": vocab_size}
    if dtype:
        extra["dtype"] = dtype
    config = component_config(registries, "models", model_node, **extra)
    model_class = registries.models.get(model_node.name).load()
    return model_class(config, rngs=nnx.Rngs(params=key))
