"""A model family in one cheap description: config, presets, model class, HF mapping.

Each family folder (``gpt/``, ``llama/``, ...) holds ``config.py`` (its config dataclass and
presets, and at its end its :class:`Family`, made by :meth:`Family.of_package`),
``model.py`` (the nnx model), ``hf.py`` (its Hugging Face mapping, see
:mod:`theseus.models.hf`) and an ``__init__`` exporting that ``FAMILY``;
``theseus.models.families.FAMILIES`` lists them. Cheap to import (no JAX): the model and HF
modules are named by import path and imported when used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from theseus.core.components import Component, load_target


@dataclass(frozen=True, eq=False)
class Family:
    name: str  # the registered model name: jobs <name>/train/pretrain, <name>/generate, ...
    config: type  # the config dataclass the model class is built from
    model: str  # "package.module:Class", built as Class(config, rngs=nnx.Rngs(...))
    description: str
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)  # model.preset=NAME
    hf: str = ""  # the module mapping the family to transformers; "" for none

    @classmethod
    def of_package(
        cls, module: str, config: type, presets: dict[str, dict[str, Any]], description: str
    ) -> Family:
        """The family of a folder laid out as above, declared in its config module (which
        passes its ``__name__``, ``<package>.config``): registered under the folder's name, its
        model the class of ``<package>.model`` named as its config class less ``Config``
        (``LlamaConfig``: ``Llama``), its Hugging Face mapping ``<package>.hf``."""
        package = module.removesuffix(".config")
        return cls(
            name=package.rpartition(".")[2],
            config=config,
            model=f"{package}.model:{config.__name__.removesuffix('Config')}",
            description=description,
            presets=presets,
            hf=f"{package}.hf",
        )

    def component(self) -> Component:
        """What core's model registry holds: its config tree reads ``extra["presets"]``, and
        ``init.hf`` reads ``extra["hf_config"]`` (a function ``(model name, config.json) ->
        model.* values``) to fill the model config from a checkpoint's config.json."""
        extra: dict[str, Any] = {"presets": self.presets}
        if self.hf:
            extra["hf_config"] = "theseus.models.hf.checkpoint:model_values"
        return Component(self.name, self.config, self.model, self.description, extra=extra)

    def load_model(self) -> type:
        return load_target(self.model)

    def load_hf(self) -> ModuleType:
        return load_target(self.hf)
