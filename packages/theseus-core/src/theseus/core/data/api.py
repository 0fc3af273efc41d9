"""What the trainer calls: the tokenize prerequisites of a ``data`` config, and its batches."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from theseus.core.data import format as fmt
from theseus.core.data.errors import DataError, SettingsConflictError
from theseus.core.data.loader import TrainingData
from theseus.core.data.reader import TokenizedDataset
from theseus.core.jobs import Prerequisite

TRAINED_TOKENIZERS = ("bpe",)


def mixture_entries(data: Any) -> list[tuple[str, float]]:
    """``[(dataset, weight), ...]``: the mixture, or the single dataset with weight 1."""
    mixture = dict(data.mixture or {})
    if not mixture:
        return [(str(data.dataset), 1.0)]
    for name, weight in mixture.items():
        if not float(weight) > 0:
            raise DataError(f"data.mixture.{name} is {weight}; weights must be > 0")
    return [(str(name), float(weight)) for name, weight in mixture.items()]


def _fields(registry: Any, name: str) -> set[str]:
    if name not in registry:
        return set()
    return {f.name for f in dataclasses.fields(registry.get(name).config)}


def tokenize_overrides(data: Any, name: str, primary: str, root: str | os.PathLike) -> list[str]:
    """The ``key=value`` overrides of the ``data/tokenize/<name>`` job for this config."""
    from theseus.core.plugins import registries

    regs = registries()
    dataset_fields = _fields(regs.datasets, name)
    out: list[str] = []
    tokenizer = str(data.tokenizer)
    if name != primary and tokenizer in TRAINED_TOKENIZERS:
        # A mixture shares one vocabulary: the one trained on the first dataset.
        shared = fmt.dataset_dir(root, primary, data.suffix) / fmt.TOKENIZER_DIR / "tokenizer.json"
        out += ["tokenizer.name=hf", f"tokenizer.path={shared}"]
    else:
        out.append(f"tokenizer.name={tokenizer}")
        tokenizer_fields = _fields(regs.tokenizers, tokenizer)
        if "vocab_size" in tokenizer_fields:
            out.append(f"tokenizer.vocab_size={int(data.vocab_size)}")
        for key, value in dict(data.tokenizer_options or {}).items():
            out.append(f"tokenizer.{key}={_value(value)}")
    if name == primary:
        if data.files and "files" in dataset_fields:
            out.append(f"data.files={data.files}")
        if data.max_documents and "max_documents" in dataset_fields:
            out.append(f"data.max_documents={int(data.max_documents)}")
        for key, value in dict(data.dataset_options or {}).items():
            out.append(f"data.{key}={_value(value)}")
    out.append(f"data.validation_fraction={float(data.validation_fraction)}")
    if data.suffix:
        out.append(f"data.suffix={data.suffix}")
    if data.num_workers:
        out.append(f"data.num_workers={int(data.num_workers)}")
    return out


def _value(value: Any) -> str:
    """An override value as the CLI parses it (strings raw, the rest as YAML flow)."""
    return value if isinstance(value, str) else json.dumps(value)


def _run_name(name: str, suffix: str, overrides: list[str]) -> str:
    settings = [o for o in overrides if not o.startswith("data.num_workers=")]
    digest = hashlib.sha256("\n".join(settings).encode()).hexdigest()[:8]
    return f"data-tokenize-{name}{'-' + suffix if suffix else ''}-{digest}"


def tokenize_prerequisites(data: Any, root: str | os.PathLike = ".") -> list[Prerequisite]:
    """One ``data/tokenize/<dataset>`` prerequisite per dataset of the config, in order."""
    entries = mixture_entries(data)
    primary = entries[0][0]
    out = []
    for name, _ in entries:
        overrides = tokenize_overrides(data, name, primary, root)
        out.append(
            Prerequisite(
                key=f"data/tokenize/{name}",
                name=_run_name(name, str(data.suffix), overrides),
                overrides=tuple(overrides),
                reason=f"the trainer reads the tokenized dataset {name!r}",
            )
        )
    return out


def open_dataset(root: str | os.PathLike, data: Any, name: str, primary: str) -> TokenizedDataset:
    path = fmt.dataset_dir(root, name, str(data.suffix))
    hint = " ".join([f"data/tokenize/{name}", *tokenize_overrides(data, name, primary, root)])
    dataset = TokenizedDataset(path, job_hint=hint)
    made_with = dataset.metadata.get("settings", {}).get("tokenizer", {}).get("name")
    if name == primary and made_with != str(data.tokenizer):
        raise SettingsConflictError(
            f"{path} was tokenized with tokenizer {made_with!r} but data.tokenizer is "
            f"{str(data.tokenizer)!r}: set data.suffix to keep both, or delete {path}"
        )
    return dataset


def open_training_data(
    root: str | os.PathLike,
    data: Any,
    *,
    seq_len: int,
    global_batch_size: int,
    seed: int,
    layout: str = "packed",
    process_index: int = 0,
    process_count: int = 1,
) -> TrainingData:
    """The batches of the (complete, verified) tokenized datasets named by ``data``."""
    entries = mixture_entries(data)
    primary = entries[0][0]
    datasets = [open_dataset(root, data, name, primary) for name, _ in entries]
    first = datasets[0]
    for other in datasets[1:]:
        if other.tokenizer_fingerprint != first.tokenizer_fingerprint:
            raise SettingsConflictError(
                f"mixture datasets {first.path} and {other.path} use different tokenizers; "
                "tokenize them with the same one"
            )
    return TrainingData(
        datasets,
        [w for _, w in entries],
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        seed=seed,
        layout=layout,
        process_index=process_index,
        process_count=process_count,
        document_masking=bool(data.document_masking),
        padding_side=str(data.padding_side),
        loss_on=str(data.loss_on),
        prefetch=int(data.prefetch),
    )
