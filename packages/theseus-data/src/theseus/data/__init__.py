"""theseus.data: datasets, tokenizers and tokenization jobs (the loader lives in core)."""

from __future__ import annotations

from typing import Any


def load_tokenizer(directory: Any) -> Any:
    """A saved tokenizer (e.g. ``TrainingData.tokenizer_dir``) with encode/decode."""
    from theseus.data.tokenizers import load_tokenizer as load

    return load(directory)


__all__ = ["load_tokenizer"]
