"""Assemble finished units into the final shards, deterministically (worker count and
interruptions cannot change a byte), then describe them in ``metadata.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.data import format as fmt
from theseus.data.tokenize.units import (
    read_unit,
    unit_group,
    unit_has_mask,
    unit_lengths,
    unit_path,
)

_MASK64 = (1 << 64) - 1


def validation_documents(count: int, fraction: float) -> np.ndarray:
    """A fixed pseudo-random choice of document indices (bool mask), by index alone."""
    x = np.arange(count, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    chosen = (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction
    if fraction > 0 and count >= 2 and not chosen.any():
        chosen[-1] = True
    if count >= 1 and chosen.all():
        chosen[0] = False
    return chosen


class ShardWriter:
    """Appends documents to ``<split>-NNNNN.bin`` files, cutting at document boundaries
    (at record boundaries when a record is ``group`` documents: a preference pair)."""

    def __init__(
        self,
        out: Path,
        split: str,
        dtype: np.dtype,
        shard_tokens: int,
        mask: bool,
        group: int = 1,
    ):
        self.out, self.split, self.dtype = out, split, dtype
        self.shard_tokens, self.with_mask, self.group = shard_tokens, mask, group
        self.stems: list[str] = []
        self.documents = 0
        self.tokens = 0
        self._open = False

    def _start(self) -> None:
        stem = fmt.shard_name(self.split, len(self.stems))
        self.stems.append(stem)
        self._tokens = open(self.out / f"{stem}.bin", "wb")
        self._mask = open(self.out / f"{stem}.mask.bin", "wb") if self.with_mask else None
        self._starts: list[int] = []
        self._size = 0
        self._open = True

    def add(self, tokens: np.ndarray, mask: np.ndarray | None) -> None:
        if not self._open:
            self._start()
        self._starts.append(self._size)
        self._tokens.write(tokens.astype(self.dtype).tobytes())
        if self._mask is not None and mask is not None:
            self._mask.write(mask.astype(np.uint8).tobytes())
        self._size += len(tokens)
        self.documents += 1
        self.tokens += len(tokens)
        if self._size >= self.shard_tokens and self.documents % self.group == 0:
            self.close()

    def close(self) -> None:
        if not self._open:
            return
        self._tokens.close()
        if self._mask is not None:
            self._mask.close()
        np.save(self.out / f"{self.stems[-1]}.docs.npy", np.array(self._starts, np.int64))
        self._open = False

    def finish(self) -> None:
        if not self.stems:  # an empty split still has one (empty) shard
            self._start()
        self.close()


def assemble(
    work_dir: Path,
    out: Path,
    num_units: int,
    *,
    dtype: str,
    fraction: float,
    shard_tokens: int,
    with_mask: bool,
    max_tokens: int = 0,
) -> dict[str, Any]:
    """Write the shards from units 0..num_units-1 (the first documents reaching
    ``max_tokens`` when set); return the splits and the totals.

    The split is drawn per record: the documents of one record (the chosen and rejected
    documents of a preference pair) go to the same split, one after the other, and
    ``max_tokens`` keeps whole records."""
    first = unit_path(work_dir, 0)
    group = unit_group(first) if num_units else 1
    with_mask = with_mask or (num_units > 0 and unit_has_mask(first))  # chat or preference
    lengths, sizes = [], []
    for index in range(num_units):
        unit_tokens, unit_sizes = unit_lengths(unit_path(work_dir, index))
        lengths.append(unit_tokens)
        sizes.append(unit_sizes)
    all_lengths, all_sizes = np.concatenate(lengths), np.concatenate(sizes)
    documents = len(all_lengths)
    if max_tokens:
        reached = np.flatnonzero(np.cumsum(all_lengths) >= max_tokens)
        documents = int(reached[0]) + 1 if len(reached) else documents
        documents = -(-documents // group) * group  # whole records
    chosen = np.repeat(validation_documents(documents // group, fraction), group)
    writers = {
        split: ShardWriter(out, split, np.dtype(dtype), shard_tokens, with_mask, group)
        for split in fmt.SPLITS
    }
    document = 0
    for index in range(num_units):
        tokens, unit_tokens, mask = read_unit(unit_path(work_dir, index))
        bounds = np.concatenate([[0], np.cumsum(unit_tokens)])
        for i in range(len(unit_tokens)):
            if document >= documents:
                break
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            split = "validation" if chosen[document] else "train"
            writers[split].add(tokens[lo:hi], None if mask is None else mask[lo:hi])
            document += 1
    for writer in writers.values():
        writer.finish()
    return {
        "documents": documents,
        "tokens": int(all_lengths[:documents].sum()),
        "text_bytes": int(all_sizes[:documents].sum()),
        "splits": {
            split: {"shards": w.stems, "documents": w.documents, "tokens": w.tokens}
            for split, w in writers.items()
        },
    }


def file_checksums(out: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file of the output (tokenizer included), by relative name."""
    files = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if not path.is_file() or relative in (fmt.METADATA, fmt.SETTINGS):
            continue
        if relative.startswith("."):  # .work, .verified.json: not part of the output
            continue
        files[relative] = {"bytes": path.stat().st_size, "sha256": fmt.sha256_file(path)}
    return files
