"""The on-disk format of a tokenized dataset under ``<root>/data/<name>/<variant>/``.

The variant folder is named by what made the data (``bpe8192-3f2a9c01d4``: the tokenizer,
then a digest of the dataset, its options and the tokenizer's options; see
:mod:`theseus.core.data.identity`), so tokenizations of one corpus live side by side.

    settings.json                 what made it (written first; marks the directory)
    tokenizer/                    the tokenizer used (tokenizer_config.json + its files)
    progress.json                 while tokenizing: the units published so far (below)
    train-00000.bin               tokens, uint16 when the vocabulary fits, else uint32
    train-00000.docs.npy          int64 start offset of each document in a closed shard
    train-00000.docs.open         the same, raw int64, while the shard is still written
    train-00000.mask.bin          uint8 loss mask per token (chat data only)
    validation-00000.bin ...      the same for the fixed validation split
    metadata.json                 written last: counts, per-file checksums, format version,
                                  ``kind`` (text, chat, or preference: chat documents in
                                  pairs, chosen then rejected, never split between splits)

Tokenization appends work units to the shards in their fixed order and, after each, rewrites
``progress.json`` (after the bytes it describes are on disk): a reader may train on what is
published while the rest is tokenized. A directory without ``metadata.json`` is complete
only once the tokenize job finishes; readers wait for what they need, or refuse when no
process is writing it any more.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from theseus.core import safe_json
from theseus.core.data.errors import DataError

FORMAT_VERSION = 2
METADATA = "metadata.json"
SETTINGS = "settings.json"
PROGRESS = "progress.json"
OPEN_DOCS_SUFFIX = ".docs.open"
TOKENIZER_DIR = "tokenizer"
SPLITS = ("train", "validation")
PREFERENCE_KIND = "preference"  # metadata ``kind`` of datasets of (chosen, rejected) pairs


def data_root(root: str | os.PathLike) -> Path:
    return Path(root) / "data"


def dataset_dir(root: str | os.PathLike, name: str, variant: str) -> Path:
    """``<root>/data/<name>/<variant>``: one tokenization of dataset ``name``."""
    return data_root(root) / name / variant


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 2**16 else "uint32"


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON in ``path``; an unreadable, truncated or garbled file is one line naming it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DataError(f"cannot read {path} ({error.strerror or error})") from error
    return parse_json(raw, path)


def parse_json(raw: bytes, path: str | os.PathLike) -> Any:
    """``raw`` (the bytes of ``path``) parsed; invalid JSON is one line naming the file."""
    try:
        return safe_json.loads(raw)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        reason = (
            f"{error.msg} at line {error.lineno} column {error.colno}"
            if isinstance(error, json.JSONDecodeError)
            else "not UTF-8"
        )
        raise DataError(
            f"{path} is not valid JSON ({reason}): truncated or corrupted; delete "
            f"{Path(path).parent} and tokenize again"
        ) from None
