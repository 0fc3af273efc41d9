"""Publish finished units, in their fixed order, into the dataset's shards as they arrive.

Units finish in any order (parallel workers); :class:`Publisher` appends unit ``k`` once
units ``0..k-1`` are in, so the shards grow the same way for any worker count, and after
each unit it writes ``progress.json`` (after the bytes it describes reach the disk): what
readers may read. The document split and the shard cuts depend only on document order,
so the finished files are byte-identical however the job was run, interrupted or resumed.

Document ``i`` (record ``i`` when a record is several documents: a preference pair) is in
the validation split when a hash of ``i`` falls below the fraction. The hash of 0 is 0, so
the first record is held out whenever the fraction is above 0, unless *every* record is:
then it trains. Until a training record appears, nothing is published (that decision waits
for it, or for the end).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.data import format as fmt
from theseus.core.data.identity import content_digest


def validation_documents(count: int, fraction: float) -> np.ndarray:
    """Which of ``count`` records are held out (bool mask), as a finished dataset has them."""
    chosen = is_validation(np.arange(count), fraction)
    if count >= 1 and chosen.all():
        chosen[0] = False
    return chosen


def is_validation(indices: np.ndarray, fraction: float) -> np.ndarray:
    """The hash rule alone (a fixed pseudo-random choice by index)."""
    x = np.asarray(indices, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


class SplitWriter:
    """Appends documents to ``<split>-NNNNN`` shards, cutting after the document that
    reaches ``shard_tokens`` (at a record boundary); resumes from published state."""

    def __init__(
        self,
        out: Path,
        split: str,
        dtype: np.dtype,
        shard_tokens: int,
        with_mask: bool,
        group: int,
        shards: list[dict[str, Any]],
    ) -> None:
        self.out, self.split, self.dtype = out, split, dtype
        self.shard_tokens, self.with_mask, self.group = shard_tokens, with_mask, group
        self.shards = [dict(entry) for entry in shards]
        self.retired: list[Path] = []  # open-shard document files to delete once published
        self._handles: dict[str, Any] = {}
        self._remove_unpublished()
        if self.shards and not self.shards[-1]["closed"]:
            self._reopen(self.shards[-1])

    # ------------------------------------------------------------------ files
    def _paths(self, stem: str) -> dict[str, Path]:
        paths = {
            "tokens": self.out / f"{stem}.bin",
            "docs": self.out / f"{stem}{fmt.OPEN_DOCS_SUFFIX}",
        }
        if self.with_mask:
            paths["mask"] = self.out / f"{stem}.mask.bin"
        return paths

    def _remove_unpublished(self) -> None:
        """Shards a stopped run started after its last publication."""
        index = len(self.shards)
        while True:
            stem = fmt.shard_name(self.split, index)
            found = [p for p in self.out.glob(f"{stem}.*") if p.is_file()]
            if not found:
                return
            for path in found:
                path.unlink()
            index += 1

    def _reopen(self, entry: dict[str, Any]) -> None:
        """Cut the open shard's files back to what was published, and append from there."""
        sizes = {
            "tokens": entry["tokens"] * self.dtype.itemsize,
            "docs": entry["documents"] * 8,
            "mask": entry["tokens"],
        }
        for kind, path in self._paths(entry["stem"]).items():
            handle = open(path, "r+b" if path.exists() else "w+b")
            handle.truncate(sizes[kind])
            handle.seek(0, os.SEEK_END)
            self._handles[kind] = handle
        (self.out / f"{entry['stem']}.docs.npy").unlink(missing_ok=True)

    def _start(self) -> None:
        stem = fmt.shard_name(self.split, len(self.shards))
        self.shards.append({"stem": stem, "tokens": 0, "documents": 0, "closed": False})
        self._handles = {kind: open(path, "wb") for kind, path in self._paths(stem).items()}

    # ------------------------------------------------------------------ writing
    @property
    def documents(self) -> int:
        return sum(entry["documents"] for entry in self.shards)

    @property
    def tokens(self) -> int:
        return sum(entry["tokens"] for entry in self.shards)

    def add(self, tokens: np.ndarray, mask: np.ndarray | None) -> None:
        if not self.shards or self.shards[-1]["closed"]:
            self._start()
        entry = self.shards[-1]
        self._handles["docs"].write(np.int64(entry["tokens"]).tobytes())
        self._handles["tokens"].write(tokens.astype(self.dtype).tobytes())
        if self.with_mask:
            ones = np.ones(len(tokens), np.uint8) if mask is None else mask
            self._handles["mask"].write(ones.astype(np.uint8).tobytes())
        entry["tokens"] += len(tokens)
        entry["documents"] += 1
        if entry["tokens"] >= self.shard_tokens and entry["documents"] % self.group == 0:
            self.close()

    def flush(self) -> None:
        """Everything written so far on disk (before it is published)."""
        for handle in self._handles.values():
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        """Close the open shard: its document starts become ``<stem>.docs.npy``."""
        if not self.shards or self.shards[-1]["closed"]:
            return
        entry = self.shards[-1]
        self.flush()
        for handle in self._handles.values():
            handle.close()
        self._handles = {}
        docs = self.out / f"{entry['stem']}{fmt.OPEN_DOCS_SUFFIX}"
        starts = np.fromfile(docs, np.int64, count=entry["documents"])
        with open(self.out / f"{entry['stem']}.docs.npy", "wb") as handle:
            np.save(handle, starts)
            handle.flush()
            os.fsync(handle.fileno())
        entry["closed"] = True
        self.retired.append(docs)

    def finish(self) -> None:
        """Close the last shard (an empty split still gets one empty shard)."""
        if not self.shards:
            self._start()
        self.close()


class Publisher:
    """Appends units in order to the train and validation shards and publishes them."""

    def __init__(
        self,
        out: Path,
        header: dict[str, Any],
        *,
        fraction: float,
        shard_tokens: int,
        max_tokens: int,
        group: int,
        with_mask: bool,
    ) -> None:
        self.out = out
        self.header = header
        self.fraction, self.max_tokens, self.group = fraction, max_tokens, group
        self.dtype = np.dtype(header["token_dtype"])
        self.shard_tokens, self.with_mask = shard_tokens, with_mask
        self._held: list[tuple[np.ndarray, np.ndarray | None, int]] = []  # see module doc
        self.planned, self.planning_done = 0, False
        self._load(self._previous())

    def _previous(self) -> dict[str, Any] | None:
        """The published state of an interrupted run with these settings, if any."""
        path = self.out / fmt.PROGRESS
        if not path.exists():
            return None
        state = fmt.read_json(path)
        if state.get("settings") != self.header["settings"]:
            return None
        return state

    def _load(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.units = int(state.get("units", 0))  # units published
        self.records = int(state.get("records", 0))  # records assigned a split
        self.documents = int(state.get("documents", 0))
        self.tokens = int(state.get("tokens", 0))
        self.text_bytes = int(state.get("text_bytes", 0))
        self.done = bool(state.get("done", False))  # max_tokens reached
        self.sequence = int(state.get("sequence", 0))
        splits = state.get("splits", {})
        self.writers = {
            split: SplitWriter(
                self.out,
                split,
                self.dtype,
                self.shard_tokens,
                self.with_mask,
                self.group,
                splits.get(split, []),
            )
            for split in fmt.SPLITS
        }
        self._held = []
        self._consumed = self.units
        self.publish()

    def reset(self) -> None:
        """Start over from unit 0 (an input published already changed)."""
        for writer in self.writers.values():
            for handle in writer._handles.values():
                handle.close()
        (self.out / fmt.PROGRESS).unlink(missing_ok=True)
        for split in fmt.SPLITS:
            for path in self.out.glob(f"{split}-*"):
                path.unlink()
        self._load(None)

    # ------------------------------------------------------------------ units
    def add_unit(
        self, tokens: np.ndarray, lengths: np.ndarray, sizes: np.ndarray, mask: np.ndarray | None
    ) -> None:
        """Append the next unit's documents (in order) and publish them."""
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        count = len(lengths) // self.group
        chosen = is_validation(np.arange(self.records, self.records + count), self.fraction)
        for record in range(count):
            if self.done:
                break
            for doc in range(record * self.group, (record + 1) * self.group):
                lo, hi = int(bounds[doc]), int(bounds[doc + 1])
                part = None if mask is None else mask[lo:hi]
                self._place(bool(chosen[record]), tokens[lo:hi], part, int(sizes[doc]))
                self.tokens += hi - lo
            self.records += 1
            if self.max_tokens and self.tokens >= self.max_tokens:
                self.done = True
        self._consumed += 1
        if not self._held:
            self.publish()

    def _place(self, validation: bool, tokens: np.ndarray, mask: Any, size: int) -> None:
        holding = self.fraction > 0 and self.writers["train"].documents == 0
        if holding and validation:
            self._held.append((tokens, mask, size))  # all validation so far: wait and see
            return
        if self._held:  # a training record: the held ones stay validation
            for held_tokens, held_mask, held_size in self._held:
                self._write("validation", held_tokens, held_mask, held_size)
            self._held = []
        self._write("validation" if validation else "train", tokens, mask, size)

    def _write(self, split: str, tokens: np.ndarray, mask: Any, size: int) -> None:
        self.writers[split].add(tokens, mask)
        self.documents += 1
        self.text_bytes += size

    @property
    def next_unit(self) -> int:
        """The unit :meth:`add_unit` takes next (units held back count as taken)."""
        return self._consumed

    def plan(self, units: int, done: bool) -> None:
        """How many units the corpus has so far (and whether that is all)."""
        self.planned, self.planning_done = max(self.planned, units), done

    # ------------------------------------------------------------------ publishing
    def state(self) -> dict[str, Any]:
        return {
            **self.header,
            "units": self.units,
            "units_planned": max(self.planned, self.units),
            "planning_done": self.planning_done,
            "records": self.records,
            "documents": self.documents,
            "tokens": self.tokens,
            "text_bytes": self.text_bytes,
            "done": self.done,
            "sequence": self.sequence,
            "updated": time.time(),
            "splits": {split: w.shards for split, w in self.writers.items()},
        }

    def publish(self) -> None:
        """Flush the shards, then say in ``progress.json`` what readers may read."""
        for writer in self.writers.values():
            writer.flush()
        self.units = self._consumed
        self.sequence += 1
        fmt.write_json_atomic(self.out / fmt.PROGRESS, self.state())
        for writer in self.writers.values():
            for path in writer.retired:
                path.unlink(missing_ok=True)
            writer.retired = []

    def finish(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Close every shard and write ``metadata.json`` (last, with ``extra`` fields);
        returns it."""
        if self._held:  # every record is held out: the first one trains after all
            held, self._held = self._held, []
            for index, document in enumerate(held):
                self._write("train" if index < self.group else "validation", *document)
        for writer in self.writers.values():
            writer.finish()
        self.planning_done = True
        self.publish()
        files = file_checksums(self.out)
        metadata = {
            **self.header,
            "documents": self.documents,
            "text_bytes": self.text_bytes,
            "tokens": self.tokens,
            "splits": {
                split: {"shards": [e["stem"] for e in w.shards], "documents": w.documents}
                | {"tokens": w.tokens}
                for split, w in self.writers.items()
            },
            "files": files,
            "content": content_digest(files),
            **(extra or {}),
        }
        fmt.write_json_atomic(self.out / fmt.METADATA, metadata)
        (self.out / fmt.PROGRESS).unlink(missing_ok=True)
        return metadata


def file_checksums(out: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file of the output (tokenizer included), by relative name."""
    skipped = (fmt.METADATA, fmt.SETTINGS, fmt.PROGRESS)
    files = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if not path.is_file() or relative in skipped:
            continue
        if relative.startswith("."):  # .work, .verified.json: not part of the output
            continue
        files[relative] = {"bytes": path.stat().st_size, "sha256": fmt.sha256_file(path)}
    return files
