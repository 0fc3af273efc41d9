"""The one list of model families theseus-models registers.

Adding one is a folder beside ``gpt/`` (``config.py``, ``model.py``, ``hf.py`` and an
``__init__`` defining its ``FAMILY``) and a line here. Cheap to import: configs and presets
only (models and Hugging Face mappings are named by import path).
"""

from __future__ import annotations

from theseus.models import (
    deepseek_v3,
    gemma3,
    gpt,
    llama,
    mistral,
    mixtral,
    qwen2,
    qwen3,
    qwen3_moe,
)
from theseus.models.errors import ModelError
from theseus.models.family import Family

FAMILIES: tuple[Family, ...] = (
    gpt.FAMILY,
    llama.FAMILY,
    qwen2.FAMILY,
    qwen3.FAMILY,
    qwen3_moe.FAMILY,
    mistral.FAMILY,
    mixtral.FAMILY,
    gemma3.FAMILY,
    deepseek_v3.FAMILY,
)


def family_named(name: str) -> Family:
    for family in FAMILIES:
        if family.name == name:
            return family
    known = ", ".join(family.name for family in FAMILIES)
    raise ModelError(f"unknown model family {name!r} (known: {known})")
