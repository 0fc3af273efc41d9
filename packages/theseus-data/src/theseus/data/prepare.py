"""A trainer's ``data`` config as ``data/tokenize/<name>`` runs (``theseus_prepare_dataset``).

Each dataset of the config becomes one tokenize run whose overrides carry the config's
tokenizer and dataset options. The run name ends with a digest of those overrides, so the
same settings find the same finished run again, and its ``output`` is the folder those
settings name (:mod:`theseus.data.tokenize.identity`). A mixture shares one vocabulary:
when the tokenizer kind is trained (``extra={"trained": True}``), the datasets after the
first load the ``tokenizer.json`` trained on the first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.data import format as fmt
from theseus.core.data.config import DataConfig
from theseus.core.jobs import Prerequisite
from theseus.core.plugins import registries as default_registries
from theseus.core.runner import config_for, job_spec
from theseus.data.tokenize.identity import TokenizerNotReady, identity_settings, output_dir
from theseus.data.tokenize.migrate import migrate_root

if TYPE_CHECKING:
    from theseus.core.registry import Registries


def _registries(registries: Registries | None) -> Any:
    if registries is not None:
        return registries

    return default_registries()


def _fields(registry: Any, name: str) -> set[str]:
    """The config field names of component ``name`` (none when it is not registered)."""
    if name not in registry:
        return set()
    return {f.name for f in dataclasses.fields(registry.get(name).config)}


def is_trained(kind: str, registries: Registries | None = None) -> bool:
    """Whether tokenizer ``kind`` is trained on its dataset (registered as ``trained``)."""
    tokenizers = _registries(registries).tokenizers
    return kind in tokenizers and bool(tokenizers.get(kind).extra.get("trained", False))


def _value(value: Any) -> str:
    """An override value as the CLI parses it (strings raw, the rest as YAML flow)."""
    return value if isinstance(value, str) else json.dumps(value)


def tokenize_overrides(
    data: DataConfig,
    name: str,
    primary: str,
    root: str | os.PathLike,
    registries: Registries | None = None,
) -> list[str]:
    """The ``key=value`` overrides of the ``data/tokenize/<name>`` job for this config."""
    regs = _registries(registries)
    out: list[str] = []
    if name != primary and is_trained(data.tokenizer, regs):
        first = tokenize_overrides(data, primary, primary, root, regs)
        folder = output_of(f"data/tokenize/{primary}", first, root, regs)
        shared = Path(folder) / fmt.TOKENIZER_DIR / "tokenizer.json"
        out += ["tokenizer.name=hf", f"tokenizer.path={shared}"]
    else:
        out.append(f"tokenizer.name={data.tokenizer}")
        if "vocab_size" in _fields(regs.tokenizers, data.tokenizer):
            out.append(f"tokenizer.vocab_size={data.vocab_size}")
        for key, value in data.tokenizer_options.items():
            out.append(f"tokenizer.{key}={_value(value)}")
    if name == primary:
        dataset_fields = _fields(regs.datasets, name)
        if data.files and "files" in dataset_fields:
            out.append(f"data.files={data.files}")
        if data.max_documents and "max_documents" in dataset_fields:
            out.append(f"data.max_documents={data.max_documents}")
        for key, value in data.dataset_options.items():
            out.append(f"data.{key}={_value(value)}")
    out.append(f"data.validation_fraction={data.validation_fraction}")
    if data.suffix:
        out.append(f"data.suffix={data.suffix}")
    if data.num_workers:
        out.append(f"data.num_workers={data.num_workers}")
    return out


def output_of(
    key: str, overrides: list[str], root: str | os.PathLike, registries: Registries
) -> str:
    """The folder the tokenize job ``key`` with ``overrides`` writes ("" while the tokenizer
    file it reads does not exist yet: a mixture's shared tokenizer before the first dataset
    is tokenized)."""
    spec = job_spec(key, registries)
    config = config_for(spec, registries, overrides).to_object()
    name = key.split("/", 2)[2]
    try:
        settings = identity_settings(name, config.data, config.tokenizer)
    except TokenizerNotReady:
        return ""
    return str(output_dir(root, name, settings, config.data.suffix))


def run_name(name: str, suffix: str, overrides: list[str]) -> str:
    """``data-tokenize-<name>[-<suffix>]-<digest of the settings>`` (workers left out)."""
    settings = [o for o in overrides if not o.startswith("data.num_workers=")]
    digest = hashlib.sha256("\n".join(settings).encode()).hexdigest()[:8]
    return f"data-tokenize-{name}{'-' + suffix if suffix else ''}-{digest}"


def prepare_dataset(
    data: DataConfig,
    name: str,
    primary: str,
    root: str | os.PathLike,
    registries: Registries | None = None,
) -> Prerequisite | None:
    """The tokenize run that writes ``<root>/data/<name>/<variant>/``, or None when
    ``name`` is not a registered dataset."""
    regs = _registries(registries)
    if name not in regs.datasets:
        return None

    migrate_root(root)
    overrides = tokenize_overrides(data, name, primary, root, regs)
    key = f"data/tokenize/{name}"
    return Prerequisite(
        key=key,
        name=run_name(name, data.suffix, overrides),
        overrides=tuple(overrides),
        reason=f"the trainer reads the tokenized dataset {name!r}",
        output=output_of(key, overrides, root, regs),
    )
