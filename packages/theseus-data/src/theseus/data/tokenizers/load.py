"""Build or load tokenizers through the ``tokenizers`` registry (third-party kinds too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from theseus.data.tokenizers.base import Corpus, Tokenizer, read_config


def _kind_class(kind: str) -> Any:
    from theseus.core.plugins import registries

    return registries().tokenizers.get(kind).load()


def create_tokenizer(config: Any, corpus: Corpus) -> Tokenizer:
    """A tokenizer from a job's ``tokenizer`` config node (``name`` picks the kind)."""
    return _kind_class(str(config.name)).create(config, corpus)


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """A saved tokenizer (e.g. ``TrainingData.tokenizer_dir``), with encode/decode."""
    directory = Path(directory)
    return _kind_class(read_config(directory)["kind"]).load(directory)
