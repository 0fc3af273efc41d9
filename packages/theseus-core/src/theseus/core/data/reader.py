"""Open a tokenized dataset: refuse missing or incomplete output, verify checksums."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.data import format as fmt
from theseus.core.data.errors import (
    ChecksumError,
    DataError,
    DataIncompleteError,
    DataMissingError,
)


@dataclass
class Shard:
    """One shard of a split: tokens, document starts and (chat data) a loss mask."""

    path: Path
    tokens: np.ndarray
    doc_starts: np.ndarray
    mask: np.ndarray | None

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    def document(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        start = int(self.doc_starts[index])
        stop = (
            int(self.doc_starts[index + 1]) if index + 1 < len(self.doc_starts) else self.num_tokens
        )
        mask = self.mask[start:stop] if self.mask is not None else None
        return self.tokens[start:stop], mask


VERIFIED = ".verified.json"


class TokenizedDataset:
    """A complete tokenized dataset directory, memory-mapped."""

    def __init__(self, path: str | os.PathLike, *, job_hint: str = "", verify: bool = True):
        self.path = Path(path)
        hint = job_hint or f"data/tokenize/{self.path.name}"
        if not (self.path / fmt.METADATA).exists():
            if (self.path / fmt.SETTINGS).exists():
                raise DataIncompleteError(
                    f"tokenized data in {self.path} is incomplete (still being tokenized, or "
                    f"interrupted): let `theseus run {hint}` finish first"
                )
            raise DataMissingError(
                f"no tokenized data in {self.path}: run `theseus run {hint}` first"
            )
        self.metadata: dict[str, Any] = fmt.read_json(self.path / fmt.METADATA)
        version = self.metadata.get("format_version")
        if version != fmt.FORMAT_VERSION:
            raise DataError(
                f"{self.path / fmt.METADATA} has format version {version}; this theseus reads "
                f"version {fmt.FORMAT_VERSION}: tokenize again with `theseus run {hint}`"
            )
        if verify:
            self.verify()
        self.dtype = np.dtype(self.metadata["token_dtype"])
        self.splits: dict[str, list[Shard]] = {
            split: [self._open_shard(name) for name in self.metadata["splits"][split]["shards"]]
            for split in fmt.SPLITS
        }

    # ------------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        return int(self.metadata["tokenizer"]["vocab_size"])

    @property
    def eos_id(self) -> int:
        return int(self.metadata["tokenizer"]["eos_id"])

    @property
    def pad_id(self) -> int:
        return int(self.metadata["tokenizer"]["pad_id"])

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / fmt.TOKENIZER_DIR

    @property
    def tokenizer_fingerprint(self) -> str:
        return str(self.metadata["tokenizer"]["fingerprint"])

    @property
    def has_mask(self) -> bool:
        return bool(self.metadata.get("has_loss_mask"))

    # ------------------------------------------------------------------ checks
    def verify(self) -> None:
        """Every file listed in the metadata exists with its size and sha256 checksum.

        Hashing is skipped for files unchanged (same size and mtime) since this directory
        last verified them (``.verified.json``), so large datasets open fast the next time.
        """
        stamp_path = self.path / VERIFIED
        try:
            stamps = json.loads(stamp_path.read_text())
        except (OSError, ValueError):
            stamps = {}
        fresh = {}
        for name, expected in sorted(self.metadata["files"].items()):
            file = self.path / name
            if not file.exists():
                raise ChecksumError(f"{file} is missing (listed in {fmt.METADATA})")
            stat = file.stat()
            if stat.st_size != expected["bytes"]:
                raise ChecksumError(
                    f"{file} has {stat.st_size} bytes, expected {expected['bytes']}: truncated "
                    "or corrupted; delete the directory and tokenize again"
                )
            stamp = [stat.st_size, stat.st_mtime_ns, expected["sha256"]]
            if stamps.get(name) != stamp and fmt.sha256_file(file) != expected["sha256"]:
                raise ChecksumError(
                    f"{file} does not match its sha256 checksum: corrupted; delete the "
                    "directory and tokenize again"
                )
            fresh[name] = stamp
        if fresh != stamps:
            try:
                fmt.write_json_atomic(stamp_path, fresh)
            except OSError:  # a read-only dataset directory: verify again next time
                pass

    def _open_shard(self, stem: str) -> Shard:
        tokens_path = self.path / f"{stem}.bin"
        tokens = _memmap(tokens_path, self.dtype)
        doc_starts = np.load(self.path / f"{stem}.docs.npy")
        mask_path = self.path / f"{stem}.mask.bin"
        mask = _memmap(mask_path, np.dtype("uint8")) if mask_path.exists() else None
        return Shard(tokens_path, tokens, doc_starts, mask)


def _memmap(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros((0,), dtype=dtype)
    # A plain ndarray view of the map: slicing it skips np.memmap's per-slice overhead.
    return np.memmap(path, dtype=dtype, mode="r").view(np.ndarray)
