"""Open a tokenized dataset: refuse missing, incomplete or damaged output.

Verification (``data.verify``) always compares every file's size with ``metadata.json``;
``full`` also hashes every file (sha256) and takes the largest token id of each shard in the
same read. What a run verified is kept in its own directory (:class:`Verified`), keyed by
the digest of ``metadata.json``: a resume of that run checks sizes only, a new run hashes
again. No stamp of sizes or mtimes ever stands in for a hash.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.data import format as fmt
from theseus.core.data.config import VERIFY_MODES
from theseus.core.data.errors import (
    ChecksumError,
    DataError,
    DataIncompleteError,
    DataMissingError,
    TokenIdError,
)
from theseus.core.locks import holder

log = logging.getLogger(__name__)
CHUNK = 1 << 20  # bytes per read when hashing: in cache while hashed (16 MiB was slower)
POLL_SECONDS = 0.2  # how often a reader waiting for tokenization looks again


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


class Verified:
    """What one run verified, in ``<run>/verified-data.json``: per dataset directory, the
    sha256 of the ``metadata.json`` it hashed its files against and each shard's largest
    token id. An unreadable record is treated as empty (everything is verified again)."""

    NAME = "verified-data.json"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            entries = fmt.read_json(self.path) if self.path.exists() else {}
        except DataError:
            entries = {}
        self.entries: dict[str, Any] = entries if isinstance(entries, dict) else {}

    @classmethod
    def of_run(cls, run_dir: str | os.PathLike) -> Verified:
        return cls(Path(run_dir) / cls.NAME)

    def lookup(self, dataset: Path, digest: str) -> dict[str, int] | None:
        """The shards' largest token ids when this run hashed ``dataset`` against this very
        metadata, else None."""
        entry = self.entries.get(str(dataset))
        if isinstance(entry, dict) and entry.get("metadata_sha256") == digest:
            ids = entry.get("max_token_id")
            if isinstance(ids, dict):
                return ids
        return None

    def remember(self, dataset: Path, digest: str, max_token_id: dict[str, int]) -> None:
        self.entries[str(dataset)] = {
            "metadata_sha256": digest,
            "max_token_id": max_token_id,
            "verified": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if not self.path.parent.is_dir():  # no run directory (yet): nothing to keep
            return
        text = json.dumps(self.entries, indent=2, sort_keys=True) + "\n"
        tmp = None
        try:  # a temporary file of its own: every process of a multi-host run may write
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, prefix=f".{self.NAME}.", delete=False
            ) as handle:
                tmp = Path(handle.name)
                handle.write(text)
            os.replace(tmp, self.path)
        except OSError as error:  # a read-only or full disk: hash again next time
            log.warning("cannot record the verification in %s (%s)", self.path, error)
            if tmp is not None:
                tmp.unlink(missing_ok=True)


class TokenizedDataset:
    """A tokenized dataset directory, memory-mapped: complete, or (``wait=True``) still
    being tokenized by another process, of which it sees the published units.

    ``verify``: ``"full"`` (sizes, sha256 and token ids), ``"size"`` (sizes only) or
    ``"none"``. ``verified``: the run's record; when it holds this metadata's digest the
    files were hashed by this run already and only their sizes are checked. Data still
    being written is not hashed (its files are checked once complete, by the next open).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        job_hint: str = "",
        verify: str = "full",
        verified: Verified | None = None,
        wait: bool = False,
    ):
        if verify not in (*VERIFY_MODES, "none"):
            raise DataError(f"verify={verify!r}: expected one of {(*VERIFY_MODES, 'none')}")
        self.path = Path(path)
        self.hint = job_hint or f"data/tokenize/{self.path.parent.name}"
        self.complete = False
        self.version = 0  # grows each time more of the data is seen (:meth:`refresh`)
        self.on_complete: list[Callable[[], None]] = []  # called once it is seen complete
        self._refresh_lock = threading.Lock()
        self.max_token_id: dict[str, int] | None = None  # per shard file, once known
        self._shards: dict[tuple[str, int, int], Shard] = {}  # (stem, tokens, docs) -> shard
        if (self.path / fmt.METADATA).exists():
            self._open_complete(verify, verified)
            return
        if not (self.path / fmt.SETTINGS).exists():
            raise DataMissingError(
                f"no tokenized data in {self.path}: run `theseus run {self.hint}` first"
            )
        if not wait:
            raise DataIncompleteError(
                f"tokenized data in {self.path} is incomplete (still being tokenized, or "
                f"interrupted): let `theseus run {self.hint}` finish first"
            )
        self._open_progress()

    # ------------------------------------------------------------------ opening
    def _open_complete(self, verify: str, verified: Verified | None) -> None:
        metadata_path = self.path / fmt.METADATA
        raw = _read_bytes(metadata_path)
        self.metadata_digest = hashlib.sha256(raw).hexdigest()
        self.metadata: dict[str, Any] = fmt.parse_json(raw, metadata_path)
        self._check_metadata()
        self.dtype = np.dtype(self.metadata["token_dtype"])
        if verify != "none":
            self.verify(verify, verified)
            self.check_token_ids(self.vocab_size)
        self.splits: dict[str, list[Shard]] = {
            split: [self._open_shard(name) for name in self.metadata["splits"][split]["shards"]]
            for split in fmt.SPLITS
        }
        self.complete = True

    def _open_progress(self) -> None:
        """Open what is published; wait (while a process writes it) for its tokenizer."""
        progress = self._read_progress()
        if progress is None:
            log.info("waiting for the tokenizer of %s (the tokenize job makes it first)", self.path)
        while progress is None:
            if (self.path / fmt.METADATA).exists():  # finished meanwhile
                self._open_complete("size", None)
                return
            self.check_writer()
            time.sleep(POLL_SECONDS)
            progress = self._read_progress()
        self.metadata = progress
        self.metadata_digest = ""
        self._check_metadata(complete=False)
        self.dtype = np.dtype(progress["token_dtype"])
        self.splits = self._published_splits(progress)

    def _read_progress(self) -> dict[str, Any] | None:
        path = self.path / fmt.PROGRESS
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DataError(f"cannot read {path} ({error.strerror or error})") from error
        return fmt.parse_json(raw, path)

    def _published_splits(self, progress: dict[str, Any]) -> dict[str, list[Shard]]:
        for attempt in range(3):  # a shard closed between reading progress and its files
            try:
                return {
                    split: [self._published_shard(entry) for entry in progress["splits"][split]]
                    for split in fmt.SPLITS
                }
            except FileNotFoundError:
                if attempt == 2:
                    raise
                progress = self._read_progress() or progress
                self.metadata = progress
        raise AssertionError("unreachable")

    def _published_shard(self, entry: dict[str, Any]) -> Shard:
        stem, tokens, documents = entry["stem"], int(entry["tokens"]), int(entry["documents"])
        key = (stem, tokens, documents)
        if key not in self._shards:
            if entry.get("closed"):
                shard = self._open_shard(stem)
            else:
                shard = self._open_partial_shard(stem, tokens, documents)
            self._shards = {k: v for k, v in self._shards.items() if k[0] != stem}
            self._shards[key] = shard
        return self._shards[key]

    def refresh(self) -> bool:
        """Read what was published since (or the finished dataset); True when it grew."""
        with self._refresh_lock:
            if self.complete:
                return False
            if (self.path / fmt.METADATA).exists():
                self._open_complete("size", None)  # hashed by the run's next open
                self.version += 1
                for callback in self.on_complete:
                    callback()
                return True
            progress = self._read_progress()
            if progress is None or progress.get("sequence") == self.metadata.get("sequence"):
                return False
            self.metadata = progress
            self.splits = self._published_splits(progress)
            self.version += 1
            return True

    def check_writer(self) -> None:
        """Refuse data that no process is writing any more and that is not finished."""
        if holder(self.path) is not None or (self.path / fmt.METADATA).exists():
            return
        raise DataIncompleteError(
            f"tokenized data in {self.path} is incomplete and no process is writing it (the "
            f"tokenization stopped at {self.units_line()}): run `theseus run {self.hint}` to "
            "finish it, then run this command again"
        )

    def units_line(self) -> str:
        """``unit 12 of 40 tokenized`` (``of at least 40`` while the corpus is still being
        read): units 0..11 are published."""
        meta = getattr(self, "metadata", None) or {"units": 0}
        planned = meta.get("units_planned", "?")
        more = "" if meta.get("planning_done", True) else "at least "
        return f"unit {meta.get('units', 0)} of {more}{planned} tokenized"

    # ------------------------------------------------------------------ properties
    @property
    def settings(self) -> dict[str, Any]:
        """What made the data (the dataset, its options, the tokenizer and its options)."""
        return dict(self.metadata.get("settings") or {})

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

    @property
    def name(self) -> str:
        return str(self.metadata.get("dataset", self.path.parent.name))

    @property
    def kind(self) -> str:
        """What the documents are: ``text``, ``chat``, or ``preference`` (pairs of chat
        documents, chosen then rejected, stored one after the other)."""
        return str(self.metadata.get("kind", "text"))

    @property
    def holds_pairs(self) -> bool:
        return self.kind == fmt.PREFERENCE_KIND

    @property
    def token_files(self) -> list[str]:
        """The token shards' file names, train then validation."""
        return [
            f"{s}.bin" for split in fmt.SPLITS for s in self.metadata["splits"][split]["shards"]
        ]

    # ------------------------------------------------------------------ checks
    def _check_metadata(self, complete: bool = True) -> None:
        """The keys every reader relies on, so a hand-edited or foreign file is one line."""
        where = self.path / (fmt.METADATA if complete else fmt.PROGRESS)
        meta = self.metadata
        version = meta.get("format_version") if isinstance(meta, dict) else None
        if version != fmt.FORMAT_VERSION:
            raise DataError(
                f"{where} has format version {version}; this theseus reads version "
                f"{fmt.FORMAT_VERSION}: tokenize again with `theseus run {self.hint}`"
            )
        try:
            np.dtype(meta["token_dtype"])
            int(meta["tokenizer"]["vocab_size"])
            for split in fmt.SPLITS:
                list(meta["splits"][split] if not complete else meta["splits"][split]["shards"])
            for entry in meta["files"].values() if complete else ():
                int(entry["bytes"]), str(entry["sha256"])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise DataError(
                f"{where} is malformed ({type(error).__name__}: {error}): tokenize again with "
                f"`theseus run {self.hint}`"
            ) from None

    def check_sizes(self) -> None:
        """Every file listed in the metadata exists with its size."""
        for name, expected in sorted(self.metadata["files"].items()):
            file = self.path / name
            try:
                size = file.stat().st_size
            except FileNotFoundError:
                raise ChecksumError(f"{file} is missing (listed in {fmt.METADATA})") from None
            if size != expected["bytes"]:
                raise ChecksumError(
                    f"{file} has {size} bytes, expected {expected['bytes']}: truncated "
                    "or corrupted; delete the directory and tokenize again"
                )

    def verify(self, mode: str = "full", verified: Verified | None = None) -> None:
        """Sizes always; with ``mode="full"`` the sha256 of every file and each shard's
        largest token id, unless ``verified`` shows this run hashed this metadata already."""
        self.check_sizes()
        known = verified.lookup(self.path, self.metadata_digest) if verified else None
        if known is not None:
            self.max_token_id = known
            return
        if mode != "full":
            return
        self.max_token_id = self.hash_files()
        if verified is not None:
            verified.remember(self.path, self.metadata_digest, self.max_token_id)

    def hash_files(self) -> dict[str, int]:
        """Hash every file against the metadata (files in parallel, large reads); returns
        the largest token id of each non-empty shard, found in the same read."""
        files = sorted(self.metadata["files"].items(), key=lambda kv: -kv[1]["bytes"])
        shards = set(self.token_files)
        total = sum(entry["bytes"] for _, entry in files)
        started = time.perf_counter()

        def check(item: tuple[str, dict]) -> tuple[str, int | None]:
            name, expected = item
            file = self.path / name
            digest, top = scan_file(file, self.dtype if name in shards else None)
            if digest != expected["sha256"]:
                raise ChecksumError(
                    f"{file} does not match its sha256 checksum: corrupted; delete the "
                    "directory and tokenize again"
                )
            return name, top

        pool = ThreadPoolExecutor(max(1, min(len(files), _cores(), 8)))
        try:
            found = dict(pool.map(check, files))
        finally:  # a bad file stops the rest: nothing left to hash
            pool.shutdown(cancel_futures=True)
        seconds = time.perf_counter() - started
        log.info(
            "verified %s: %d files, %.1f MB hashed in %.1f s (%.0f MB/s)",
            self.path,
            len(files),
            total / 1e6,
            seconds,
            total / 1e6 / max(seconds, 1e-9),
        )
        return {name: top for name, top in found.items() if top is not None}

    def check_token_ids(self, vocab_size: int) -> None:
        """Refuse a shard holding an id >= ``vocab_size`` (known once hashed by this run)."""
        for name, top in sorted((self.max_token_id or {}).items()):
            if top >= vocab_size:
                raise TokenIdError(
                    f"{self.path / name} holds token id {top} >= the vocabulary size "
                    f"{vocab_size}: the data was tokenized with another tokenizer, or is "
                    "corrupted; delete the directory and tokenize again"
                )

    def _open_shard(self, stem: str) -> Shard:
        tokens_path = self.path / f"{stem}.bin"
        tokens = _memmap(tokens_path, self.dtype)
        doc_starts = np.load(self.path / f"{stem}.docs.npy")
        mask_path = self.path / f"{stem}.mask.bin"
        mask = _memmap(mask_path, np.dtype("uint8")) if mask_path.exists() else None
        return Shard(tokens_path, tokens, doc_starts, mask)

    def _open_partial_shard(self, stem: str, tokens: int, documents: int) -> Shard:
        """The published part of a shard still being written (its first ``tokens`` tokens
        and ``documents`` document starts; the writer only appends)."""
        tokens_path = self.path / f"{stem}.bin"
        doc_starts = np.fromfile(
            self.path / f"{stem}{fmt.OPEN_DOCS_SUFFIX}", np.int64, count=documents
        )
        mask_path = self.path / f"{stem}.mask.bin"
        mask = _memmap(mask_path, np.dtype("uint8"), tokens) if self.has_mask else None
        return Shard(tokens_path, _memmap(tokens_path, self.dtype, tokens), doc_starts, mask)


def scan_file(path: Path, dtype: np.dtype | None = None) -> tuple[str, int | None]:
    """(sha256, largest item when ``dtype`` is given and the file is not empty), one read."""
    digest = hashlib.sha256()
    top: int | None = None
    buffer = bytearray(CHUNK)  # a multiple of every item size
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while filled := _fill(handle, view):
            digest.update(view[:filled])
            if dtype is not None and filled >= dtype.itemsize:
                block = np.frombuffer(buffer, dtype, count=filled // dtype.itemsize)
                top = max(top if top is not None else 0, int(block.max()))
    return digest.hexdigest(), top


def _fill(handle: Any, view: memoryview) -> int:
    """Read until ``view`` is full or the file ends; the number of bytes read."""
    filled = 0
    while filled < len(view):
        count = handle.readinto(view[filled:])
        if not count:
            break
        filled += count
    return filled


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise DataError(f"cannot read {path} ({error.strerror or error})") from error


def _memmap(path: Path, dtype: np.dtype, count: int | None = None) -> np.ndarray:
    """The file as an array (its first ``count`` items when given)."""
    if count == 0 or path.stat().st_size == 0:
        return np.zeros((0,), dtype=dtype)
    shape = None if count is None else (count,)
    # A plain ndarray view of the map: slicing it skips np.memmap's per-slice overhead.
    return np.memmap(path, dtype=dtype, mode="r", shape=shape).view(np.ndarray)
