"""What the trainer calls: the tokenize prerequisites of a ``data`` config, and its batches."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from theseus.core.data import format as fmt
from theseus.core.data.config import DataConfig
from theseus.core.data.errors import DataError, SettingsConflictError
from theseus.core.data.loader import TrainingData
from theseus.core.data.reader import TokenizedDataset, Verified
from theseus.core.jobs import Prerequisite
from theseus.core.plugins import registries as default_registries

if TYPE_CHECKING:
    from theseus.core.plugins import Registries


def mixture_entries(data: DataConfig) -> list[tuple[str, float]]:
    """``[(dataset, weight), ...]``: the mixture, or the single dataset with weight 1."""
    if not data.mixture:
        return [(data.dataset, 1.0)]
    for name, weight in data.mixture.items():
        if not weight > 0:
            raise DataError(f"data.mixture.{name} is {weight}; weights must be > 0")
    return list(data.mixture.items())


def dataset_prerequisite(
    data: DataConfig,
    name: str,
    primary: str,
    root: str | os.PathLike,
    registries: Registries | None = None,
) -> Prerequisite:
    """The job that prepares dataset ``name``, from the plugin that provides it."""
    registries = registries or default_registries()
    found = registries.hook.theseus_prepare_dataset(
        data=data, name=name, primary=primary, root=str(root)
    )
    if found is None:
        from theseus.core.requirements import plugin_hint

        loaded = {p.distribution for p in getattr(registries, "plugins", []) if p.error is None}
        missing = plugin_hint("dataset", name, loaded)
        if missing:
            raise DataError(f"data.dataset {name!r}: {missing}")
        raise DataError(
            f"data.dataset: no installed plugin prepares dataset {name!r} "
            "(pip install theseus-data, or the plugin that registers it)"
        )
    return found


def tokenize_prerequisites(
    data: DataConfig, root: str | os.PathLike = ".", registries: Registries | None = None
) -> list[Prerequisite]:
    """One prerequisite per dataset of the config (mixture order), e.g. its tokenize job.

    A dataset already tokenized is checked here (readable metadata, every file's size),
    before the job touches its run directory: a damaged one is refused without a trace.
    """
    entries = mixture_entries(data)
    primary = entries[0][0]
    found = [dataset_prerequisite(data, name, primary, root, registries) for name, _ in entries]
    for (name, _), prepare in zip(entries, found, strict=True):
        path = fmt.dataset_dir(root, name, data.suffix)
        if (path / fmt.METADATA).exists():
            hint = " ".join([prepare.key, *prepare.overrides])
            TokenizedDataset(path, job_hint=hint, verify="size")
    return found


def open_dataset(
    root: str | os.PathLike,
    data: DataConfig,
    name: str,
    primary: str,
    verified: Verified | None = None,
) -> TokenizedDataset:
    path = fmt.dataset_dir(root, name, data.suffix)
    prepare = dataset_prerequisite(data, name, primary, root)
    hint = " ".join([prepare.key, *prepare.overrides])
    dataset = TokenizedDataset(path, job_hint=hint, verify=data.verify, verified=verified)
    made_with = dataset.metadata.get("settings", {}).get("tokenizer", {}).get("name")
    if name == primary and made_with != data.tokenizer:
        raise SettingsConflictError(
            f"{path} was tokenized with tokenizer {made_with!r} but data.tokenizer is "
            f"{data.tokenizer!r}: set data.suffix to keep both, or delete {path}"
        )
    return dataset


def open_training_data(
    root: str | os.PathLike,
    data: DataConfig,
    *,
    seq_len: int,
    global_batch_size: int,
    seed: int,
    layout: str = "packed",
    process_index: int = 0,
    process_count: int = 1,
    vocab_size: int | None = None,
    verified: Verified | None = None,
) -> TrainingData:
    """The batches of the (complete, verified) tokenized datasets named by ``data``.

    Files are checked as ``data.verify`` says (``verified``: the run's record of what it
    hashed already); token ids must be below ``vocab_size`` (default: the tokenizer's).
    """
    entries = mixture_entries(data)
    primary = entries[0][0]
    datasets = [open_dataset(root, data, name, primary, verified) for name, _ in entries]
    first = datasets[0]
    for other in datasets[1:]:
        if other.tokenizer_fingerprint != first.tokenizer_fingerprint:
            raise SettingsConflictError(
                f"mixture datasets {first.path} and {other.path} use different tokenizers; "
                "tokenize them with the same one"
            )
    if vocab_size is not None:
        for dataset in datasets:
            dataset.check_token_ids(vocab_size)
    return TrainingData(
        datasets,
        [w for _, w in entries],
        seq_len=seq_len,
        global_batch_size=global_batch_size,
        seed=seed,
        layout=layout,
        process_index=process_index,
        process_count=process_count,
        document_masking=data.document_masking,
        padding_side=data.padding_side,
        loss_on=data.loss_on,
        prefetch=data.prefetch,
    )
