"""Hugging Face interop: import a transformers checkpoint directory, export one.

The shared machinery lives here (``checkpoint``: files, lookups, parameter conversion;
``mapping``: the tensor rules); what is particular to a family lives in its ``hf.py``,
named by its :class:`~theseus.models.family.Family` and holding:

* ``ARCHITECTURE``: the transformers class in ``config.json`` (``"LlamaForCausalLM"``)
* ``MODEL_TYPE``: its ``model_type`` (``"llama"``; matched when config.json names no
  ``architectures``)
* ``FREE_FIELDS`` (optional): config fields that config.json does not decide, besides the
  compute choices every family has (``dtype``, ``attention``): ``init.hf`` leaves them alone
* ``config_from_hf(hf: dict) -> Config``: the family's config of a ``config.json``,
  raising ``UnsupportedArchitectureError`` for variants the family cannot run
* ``config_to_hf(config) -> dict``: the family's keys of ``config.json`` (the shared ones,
  ``architectures``, ``model_type``, ``vocab_size``, ``tie_word_embeddings``,
  ``initializer_range``, are added here), raising ``ModelError`` where it has no equivalent
* ``rules(config) -> list[Rule]``: which HF tensors fill which parameters
"""

from typing import Any

__all__ = [
    "Rule",
    "config_from_hf",
    "config_to_hf",
    "family_for",
    "family_of",
    "load_hf",
    "params_from_hf",
    "params_to_hf",
    "read_config",
    "read_tensors",
    "resolve",
    "save_hf",
]
_JAX_FREE = {"read_config": "files", "resolve": "files"}


def __getattr__(name: str) -> Any:
    """Imported on first use: ``theseus.models.hf.files`` (reading a folder, what a
    refusal needs) must not import JAX through this package."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    if name == "Rule":
        return importlib.import_module("theseus.models.hf_mapping").Rule
    module = importlib.import_module(f"{__name__}.{_JAX_FREE.get(name, 'checkpoint')}")
    return getattr(module, name)
