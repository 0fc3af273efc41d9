"""What the trainer calls: the tokenize prerequisites of a ``data`` config, and its batches.

Where a dataset lives is decided by the plugin that prepares it (``theseus_prepare_dataset``
returns its tokenize job with ``output``: the folder named by what makes the data). A
dataset another process is tokenizing right now is not tokenized again: the trainer
reads it as it is published.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from theseus.core.data import format as fmt
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.data.config import DataConfig
from theseus.core.data.errors import DataError, DataMissingError, SettingsConflictError
from theseus.core.data.identity import (
    DataRecord,
    changed_sources_folder,
    dataset_entry,
    variant_name,
)
from theseus.core.data.loader import TrainingData
from theseus.core.data.mixture import Stage, normalized, stage_ends
from theseus.core.data.reader import TokenizedDataset, Verified
from theseus.core.jobs import Prerequisite
from theseus.core.locks import holder
from theseus.core.plugins import registries as default_registries
from theseus.core.requirements import plugin_hint

if TYPE_CHECKING:
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


def mixture_entries(data: DataConfig) -> list[tuple[str, float]]:
    """``[(dataset, weight), ...]``: the mixture (the schedule's datasets, in order of first
    mention, with the first stage's weights), or the single dataset with weight 1."""
    if data.mixture_schedule:
        if data.mixture:
            raise DataError(
                "data.mixture and data.mixture_schedule are both set: give the weights in one "
                "of them (a schedule's stages each have their own)"
            )
        names: list[str] = []
        for stage in data.mixture_schedule:
            names += [name for name in stage.weights if name not in names]
        first = data.mixture_schedule[0].weights
        return [(name, float(first.get(name, 0.0))) for name in names]
    if not data.mixture:
        return [(data.dataset, 1.0)]
    for name, weight in data.mixture.items():
        if not weight > 0:
            raise DataError(f"data.mixture.{name} is {weight}; weights must be > 0")
    return list(data.mixture.items())


def mixture_stages(
    data: DataConfig, names: list[str], total_steps: int | None, tokens_per_step: int
) -> list[Stage] | None:
    """The stages of ``data.mixture_schedule`` over ``names`` (None without a schedule)."""
    if not data.mixture_schedule:
        return None
    ends = stage_ends(data.mixture_schedule, total_steps, tokens_per_step)
    stages, start = [], 0
    for index, (stage, end) in enumerate(zip(data.mixture_schedule, ends, strict=True)):
        weights = [float(stage.weights.get(name, 0.0)) for name in names]
        stages.append(Stage(start, end, normalized(weights, f"data.mixture_schedule[{index}]")))
        start = end or start
    return stages


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
        loaded = {p.distribution for p in getattr(registries, "plugins", []) if p.error is None}
        missing = plugin_hint("dataset", name, loaded)
        if missing:
            raise DataError(f"data.dataset {name!r}: {missing}")
        raise DataError(
            f"data.dataset: no installed plugin prepares dataset {name!r} "
            "(pip install theseus-data, or the plugin that registers it)"
        )
    return found


def kept_folder(
    root: str | os.PathLike, run_dir: str | os.PathLike | None, name: str, prepare: Prerequisite
) -> Path | None:
    """The folder run ``run_dir`` recorded for dataset ``name``, when the files the dataset
    reads changed since the run started (its config now names another folder): a resume
    trains on what it recorded, a new run (no ``run_dir``) on the files as they are."""
    if run_dir is None:
        return None
    recorded = changed_sources_folder(root, run_dir, name, prepare.output)
    if recorded is None or not (recorded / fmt.METADATA).is_file():
        return None  # (an unfinished one cannot be finished from other files)
    log.info(
        "run %s trains on %s, the files of dataset %r as they were when it started (they "
        "changed since: a new run tokenizes them as they are)",
        Path(run_dir).name, recorded, name,
    )  # fmt: skip
    return recorded


def dataset_path(
    root: str | os.PathLike,
    data: DataConfig,
    name: str | None = None,
    registries: Registries | None = None,
) -> Path:
    """The folder of dataset ``name`` (default: the config's first) as ``data`` makes it."""
    entries = mixture_entries(data)
    primary = entries[0][0]
    prepare = dataset_prerequisite(data, name or primary, primary, root, registries)
    if not prepare.output:
        raise DataMissingError(
            f"dataset {name!r} takes its tokenizer from {primary!r}, which is not tokenized yet: "
            f"run `theseus run {prepare.key}` after tokenizing {primary!r}"
        )
    return Path(prepare.output)


def run_dataset_path(
    root: str | os.PathLike, data: DataConfig, run_dir: str | os.PathLike | None = None
) -> Path:
    """The first dataset a run trained on: from its record (``data-identity.json``) when it
    has one, else as ``data`` names it (a folder that may not exist)."""
    if run_dir is not None:
        entries = DataRecord(run_dir).entries
        if entries:
            return Path(root) / entries[0]["path"]
    try:
        return dataset_path(root, data)
    except DataError:  # its tokenizer file is gone: no folder can be named
        return fmt.data_root(root) / mixture_entries(data)[0][0] / "(unknown)"


def find_dataset(root: str | os.PathLike, name: str) -> Path:
    """``<root>/data/<name>/<variant>`` when ``name`` has one tokenization there (or is
    ``<name>/<variant>`` itself); several or none are one line listing what there is."""
    base = fmt.data_root(root) / name
    if (base / fmt.SETTINGS).exists():
        return base
    variants = sorted(p.name for p in base.glob("*") if (p / fmt.SETTINGS).exists())
    if len(variants) == 1:
        return base / variants[0]
    if not variants:
        raise DataMissingError(f"no tokenized dataset {name!r} under {fmt.data_root(root)}")
    raise DataError(
        f"dataset {name!r} has {len(variants)} tokenizations under {base} ({', '.join(variants)}): "
        f"name one as {name}/<variant>"
    )


def tokenize_prerequisites(
    data: DataConfig,
    root: str | os.PathLike = ".",
    registries: Registries | None = None,
    run_dir: str | os.PathLike | None = None,
) -> list[Prerequisite]:
    """One prerequisite per dataset of the config (mixture order), e.g. its tokenize job.

    A dataset already tokenized is checked here (readable metadata, every file's size),
    before the job touches its run directory: a damaged one is refused without a trace. A
    dataset another process is tokenizing now has no prerequisite: the trainer reads it
    while it is written.
    """
    entries = mixture_entries(data)
    primary = entries[0][0]
    found = [dataset_prerequisite(data, name, primary, root, registries) for name, _ in entries]
    kept = []
    for (name, _), prepare in zip(entries, found, strict=True):
        if kept_folder(root, run_dir, name, prepare) is not None:
            continue  # a resume keeps the data it recorded (its files changed since)
        path = Path(prepare.output) if prepare.output else None
        if path is not None and (path / fmt.METADATA).exists():
            hint = " ".join([prepare.key, *prepare.overrides])
            TokenizedDataset(path, job_hint=hint, verify="size")
        elif path is not None and (path / fmt.SETTINGS).exists() and (who := holder(path)):
            log.info("%s is being tokenized by %s: training reads it as it is written", path, who)
            continue
        kept.append(prepare)
    return kept


def open_dataset(
    root: str | os.PathLike,
    data: DataConfig,
    name: str,
    primary: str,
    verified: Verified | None = None,
    path: Path | None = None,
    run_dir: str | os.PathLike | None = None,
) -> TokenizedDataset:
    """Dataset ``name`` of ``data``, from its folder (``path``: a folder a run recorded;
    ``run_dir``: the run that trains on it, see :func:`kept_folder`)."""
    prepare = dataset_prerequisite(data, name, primary, root)
    path = path or kept_folder(root, run_dir, name, prepare)
    if path is None and not prepare.output:
        raise DataMissingError(
            f"dataset {name!r} takes its tokenizer from {primary!r}, which is not tokenized yet: "
            f"run `theseus run {prepare.key}` after tokenizing {primary!r}"
        )
    path = path or Path(prepare.output)
    hint = " ".join([prepare.key, *prepare.overrides])
    dataset = TokenizedDataset(
        path, job_hint=hint, verify=data.verify, verified=verified, wait=True
    )
    made = variant_name(dataset.settings)
    if not (path.name == made or path.name.startswith(made + "-")):
        raise SettingsConflictError(
            f"{path} holds data made with other settings than its name says (they give "
            f"{made}): it was moved or edited by hand; delete it and tokenize again"
        )
    return dataset


def _complete(record: DataRecord, root: str | os.PathLike, datasets: list) -> None:
    """Record the content of the datasets that are complete now (a run's data finished
    tokenizing while it trained)."""
    try:
        record.check([dataset_entry(root, d) for d in datasets])
    except OSError as error:  # a full or read-only disk: the next open records it
        log.warning("cannot update %s (%s)", record.path, error)


def open_training_data(
    root: str | os.PathLike,
    data: DataConfig,
    *,
    seq_len: int,
    batch: BatchPlan | int,
    seed: int,
    layout: str = "packed",
    process_index: int = 0,
    vocab_size: int | None = None,
    verified: Verified | None = None,
    run_dir: str | os.PathLike | None = None,
    total_steps: int | None = None,
    from_record: bool = False,
) -> TrainingData:
    """The batches of the tokenized datasets named by ``data`` (read as they are published
    when another process is still tokenizing them).

    Files are checked as ``data.verify`` says (``verified``: the run's record of what it
    hashed already); token ids must be below ``vocab_size`` (default: the tokenizer's).
    ``run_dir``: the run that trains on them, whose record of its data
    (:class:`~theseus.core.data.identity.DataRecord`) must match. ``total_steps``: how
    long the run trains (for ``data.mixture_schedule`` stages given as fractions).
    ``from_record``: open the folders the run recorded (inspecting it: its config may be
    damaged), still refusing data that changed, and write nothing. ``batch``: the run's
    :class:`BatchPlan` (``process_index`` reads its slice), or rows for one process.
    """
    if isinstance(batch, int):
        batch = BatchPlan.of(batch, pairs=layout == "pairs")
    if verified is None and run_dir is not None:
        verified = Verified.of_run(run_dir)
    entries = mixture_entries(data)
    primary = entries[0][0]
    record = DataRecord(run_dir) if run_dir is not None else None
    recorded = {}
    if from_record and record is not None and record.entries:
        recorded = {e.get("name"): Path(root) / str(e.get("path")) for e in record.entries}
    datasets = [
        open_dataset(root, data, name, primary, verified, recorded.get(name), run_dir)
        for name, _ in entries
    ]
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
    if record is not None and from_record:
        record.check([dataset_entry(root, d) for d in datasets], write=False)
    elif record is not None and run_dir is not None:
        if record.entries is None and any(Path(run_dir, "checkpoints").glob("[0-9]*")):
            log.warning(
                "run %s checkpointed before runs recorded their data: its data is recorded "
                "now, as it is; a mixture, or a dataset of more than data.shuffle_rows rows, "
                "is read in another order than the theseus that started it read it",
                Path(run_dir).name,
            )
        record.check([dataset_entry(root, d) for d in datasets])
        for dataset in datasets:  # data still being tokenized: record its content once done
            if not dataset.complete:
                dataset.on_complete.append(lambda: _complete(record, root, datasets))
    names = [name for name, _ in entries]
    stages = mixture_stages(data, names, total_steps, batch.global_rows * seq_len)
    return TrainingData(
        datasets,
        [w for _, w in entries],
        seq_len=seq_len,
        batch=batch,
        seed=seed,
        layout=layout,
        process_index=process_index,
        document_masking=data.document_masking,
        padding_side=data.padding_side,
        loss_on=data.loss_on,
        prefetch=data.prefetch,
        shuffle_rows=data.shuffle_rows,
        stages=stages,
    )
