"""Build or load tokenizers through the ``tokenizers`` registry (third-party kinds too)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from theseus.core import safe_json
from theseus.core.plugins import registries
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.base import CONFIG_FILE, Corpus, Tokenizer, read_config
from theseus.data.tokenizers.huggingface import HFTokenizer, read_chat_template

HF_FILE = "tokenizer.json"


def _kind_class(kind: str) -> Any:
    return registries().tokenizers.get(kind).load()


def create_tokenizer(config: Any, corpus: Corpus) -> Tokenizer:
    """A tokenizer from a job's typed ``tokenizer`` config (``name`` picks the kind)."""
    return _kind_class(config.name).create(config, corpus)


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """A saved tokenizer (e.g. ``TrainingData.tokenizer_dir``), with encode/decode."""
    directory = Path(directory)
    return _kind_class(read_config(directory)["kind"]).load(directory)


def _saved_kind(directory: Path) -> str | None:
    """The kind a theseus-saved tokenizer directory names, else None.

    A Hugging Face model directory has a ``tokenizer_config.json`` too, of another schema
    (no ``kind``): that one is read through its ``tokenizer.json`` instead.
    """
    path = directory / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        saved = safe_json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    kind = saved.get("kind") if isinstance(saved, dict) else None
    return kind if isinstance(kind, str) else None


def find_tokenizer(path: str | os.PathLike) -> Tokenizer | None:
    """The tokenizer at ``path``, or None when ``path`` holds none theseus-data can read.

    ``path`` is a tokenizer saved by a tokenize job (a dataset's ``tokenizer/``), a
    directory holding a ``tokenizer.json``, or a ``.json`` tokenizer file (with the chat
    template of the folder it is in, if any).
    """
    path = Path(path).expanduser()
    if path.is_dir():
        if _saved_kind(path) is not None:
            return load_tokenizer(path)
        path = path / HF_FILE
    if not (path.is_file() and path.suffix == ".json"):
        return None
    template, tokens = read_chat_template(path.parent)
    try:
        return HFTokenizer(path.read_text(), chat_template=template, chat_tokens=tokens)
    except TokenizerError:
        raise
    except Exception as error:  # the Rust parser's errors have no common type
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise TokenizerError(f"{path} is not a Hugging Face tokenizer.json: {first}") from error
