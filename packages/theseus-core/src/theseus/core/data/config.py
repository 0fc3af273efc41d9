"""The trainer's ``data`` config group (no JAX, no tokenizers: cheap to import)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.components import option
from theseus.core.ranges import check_config

DEFAULT_DATASET = "python-stdlib"
VERIFY_MODES = ("full", "size")


@dataclass
class MixtureStage:
    """One stage of ``data.mixture_schedule``: weights until a point of training."""

    weights: dict[str, float] = option(
        help="{dataset: weight} of this stage (normalized; 0 leaves a dataset out)",
        factory=dict,
    )
    until: float = option(0.0, "end of the stage as a fraction of training, in (0, 1]")
    until_step: int = option(0, "end of the stage as a step number")
    until_tokens: int = option(0, "end of the stage as a count of training tokens")


@dataclass
class DataConfig:
    dataset: str = option(DEFAULT_DATASET, "registered dataset to train on (tokenized on demand)")
    tokenizer: str = option("bpe", "registered tokenizer kind: bpe, byte, tiktoken, hf, ...")
    vocab_size: int = option(8192, "vocabulary size of trained tokenizers (bpe)", ge=1)
    tokenizer_options: dict[str, Any] = option(
        help="extra tokenizer options, e.g. {path: tok.json} for hf, {encoding: cl100k_base}",
        factory=dict,
    )
    files: str = option("", "comma-separated globs of local files, for datasets that read files")
    max_documents: int = option(0, "use at most this many documents (0: all)", ge=0)
    dataset_options: dict[str, Any] = option(
        help="extra options of the dataset, passed as data.<key>=<value> to its tokenize job",
        factory=dict,
    )
    suffix: str = option("", "output directory suffix: <root>/data/<dataset>-<suffix>")
    mixture: dict[str, float] = option(
        help="weighted mixture {dataset: weight}; empty means the single `dataset`",
        factory=dict,
    )
    mixture_schedule: list[MixtureStage] = option(
        help="mixture weights changing over training: [{until: 0.8, weights: {...}}, "
        "{weights: {...}}] (the last stage runs to the end); empty: data.mixture",
        factory=list,
    )
    shuffle_rows: int = option(
        65536,
        "rows shuffled together on the first pass over the data: a block of this many rows "
        "must be tokenized before its first step (training can start while tokenizing)",
        ge=1,
    )
    validation_fraction: float = option(
        0.01, "fraction of documents held out for validation", ge=0, lt=1
    )
    num_workers: int = option(
        0, "tokenization worker processes (0: all cores)", resume_safe=True, ge=0
    )
    document_masking: bool = option(True, "restart positions and mask attention per document")
    padding_side: str = option(
        "right", "padded layout: pad on the 'left' or 'right'", choices=("left", "right")
    )
    loss_on: str = option(
        "assistant",
        "chat data: learn 'assistant' turns only, or 'all' tokens",
        choices=("assistant", "all"),
    )
    prefetch: int = option(
        4, "batches prepared ahead in background threads", resume_safe=True, ge=0
    )
    verify: str = option(
        "full",
        "check the tokenized files when a run first opens them: 'full' (sha256 and token ids, "
        "once per run) or 'size' (sizes only: fast, for huge datasets)",
        resume_safe=True,
        choices=VERIFY_MODES,
    )

    def __post_init__(self) -> None:
        check_config(self, "data")  # ranges and choices


@dataclass
class SFTDataConfig(DataConfig):
    dataset: str = option(
        "addition", "registered chat dataset to fine-tune on (tokenized on demand)"
    )


@dataclass
class PreferenceDataConfig(DataConfig):
    dataset: str = option(
        "addition-preference",
        "registered preference dataset (prompt, chosen, rejected) to train on",
    )
    validation_fraction: float = option(
        0.05,
        "fraction of pairs held out for validation (reward accuracy and margin)",
        ge=0,
        lt=1,
    )
