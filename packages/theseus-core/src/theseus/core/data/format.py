"""The on-disk format of a tokenized dataset under ``<root>/data/<name>/``.

    settings.json                 what was asked for (written first; marks the directory)
    tokenizer/                    the tokenizer used (tokenizer_config.json + its files)
    train-00000.bin               tokens, uint16 when the vocabulary fits, else uint32
    train-00000.docs.npy          int64 start offset of each document in the shard
    train-00000.mask.bin          uint8 loss mask per token (chat data only)
    validation-00000.bin ...      the same for the fixed validation split
    metadata.json                 written last: counts, per-file checksums, format version,
                                  ``kind`` (text, chat, or preference: chat documents in
                                  pairs, chosen then rejected, never split between splits)

A directory without ``metadata.json`` is incomplete and is refused by readers.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from theseus.core.data.errors import DataError

FORMAT_VERSION = 1
METADATA = "metadata.json"
SETTINGS = "settings.json"
TOKENIZER_DIR = "tokenizer"
SPLITS = ("train", "validation")
PREFERENCE_KIND = "preference"  # metadata ``kind`` of datasets of (chosen, rejected) pairs


def dataset_dir(root: str | os.PathLike, name: str, suffix: str = "") -> Path:
    return Path(root) / "data" / (f"{name}-{suffix}" if suffix else name)


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
        return json.loads(raw)
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
