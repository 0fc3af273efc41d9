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

from theseus.models.hf.checkpoint import (
    config_from_hf,
    config_to_hf,
    family_for,
    family_of,
    load_hf,
    params_from_hf,
    params_to_hf,
    read_config,
    read_tensors,
    resolve,
    save_hf,
)
from theseus.models.hf_mapping import Rule

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
