"""Work units: consecutive records, tokenized by one worker into one atomic file.

Unit boundaries depend only on the record stream (``unit_bytes``), never on the worker
count, and a unit file appears only once complete (written aside, then renamed): a killed
run leaves complete units and nothing half-written, and a rerun tokenizes only the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
from theseus.data.datasets.preference import normalize, record_text_bytes
from theseus.data.tokenizers import load_tokenizer
from theseus.data.tokenizers.chat_template import encode_chats


@dataclass
class Unit:
    index: int
    records: list[Any]
    num_bytes: int

    def digest(self) -> str:
        """Identifies the unit's text: a resumed run redoes a unit whose input changed."""
        hasher = hashlib.sha256()
        for record in self.records:
            text = record if isinstance(record, str) else json.dumps(record, sort_keys=True)
            hasher.update(text.encode("utf-8", errors="surrogatepass"))
            hasher.update(b"\0")
        return hasher.hexdigest()


def plan_units(records: Iterator[Any], unit_bytes: int) -> Iterator[Unit]:
    """Group records into units of about ``unit_bytes`` characters of text."""
    batch: list[Any] = []
    size = 0
    index = 0
    for record in records:
        batch.append(record)
        size += record_bytes(record)
        if size >= unit_bytes:
            yield Unit(index, batch, size)
            index, batch, size = index + 1, [], 0
    if batch:
        yield Unit(index, batch, size)


def record_bytes(record: Any) -> int:
    if isinstance(record, str):
        return len(record)
    if isinstance(record, dict):  # a preference pair
        return record_text_bytes(record)
    return sum(len(m["content"]) for m in record)


def documents_per_record(kind: str) -> int:
    """A preference record makes two documents (chosen, rejected); others one."""
    return 2 if kind == "preference" else 1


PARTIAL_SUFFIX = ".partial"


def unit_path(work_dir: Path, index: int) -> Path:
    return work_dir / f"unit-{index:07d}.npz"


def finished_units(work_dir: Path) -> list[Path]:
    """Unit files that were completely written (a write in progress has another suffix)."""
    return sorted(work_dir.glob("unit-???????.npz"))


def remove_partial_units(work_dir: Path) -> int:
    """Delete writes that a killed run left half done; returns how many there were."""
    partial = list(work_dir.glob("unit-*" + PARTIAL_SUFFIX))
    for path in partial:
        path.unlink()
    return len(partial)


# ----------------------------------------------------------------------------- workers
# Module-level state and functions: workers start with spawn and import this module.
_TOKENIZER: Any = None
# Test hooks (a slow worker, so that readers wait for units): seconds each worker sleeps
# per unit, and a file the units from a given index on (default 1) wait for.
TEST_DELAY_ENV = "THESEUS_TEST_TOKENIZE_DELAY"
TEST_GATE_ENV = "THESEUS_TEST_TOKENIZE_GATE"
TEST_GATE_UNIT_ENV = "THESEUS_TEST_TOKENIZE_GATE_UNIT"


def _test_hooks(index: int) -> None:
    gate = os.environ.get(TEST_GATE_ENV)
    first = int(os.environ.get(TEST_GATE_UNIT_ENV) or 1)
    while gate and index >= first and not Path(gate).exists():
        time.sleep(0.05)
    if index >= first and (delay := float(os.environ.get(TEST_DELAY_ENV) or 0)):
        time.sleep(delay)


def init_worker(tokenizer_dir: str) -> None:
    """Load the saved tokenizer once per worker; one thread each (the processes are the
    parallelism). SIGINT and SIGTERM are the job's to handle (Ctrl-C reaches the whole
    process group): a worker ignores them, the job ends it; a worker whose job is gone
    (killed outright) exits by itself within a second."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_exit_without, args=(os.getppid(),), daemon=True).start()
    global _TOKENIZER

    _TOKENIZER = load_tokenizer(tokenizer_dir)


def _exit_without(parent: int) -> None:
    """End this worker once ``parent`` (its job) is gone: no worker outlives its job."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def encode_unit(
    index: int, kind: str, records: list[Any], work_dir: str, digest: str
) -> tuple[int, int, int, int]:
    """Tokenize one unit and write it; returns (index, documents, tokens, worker pid)."""
    _test_hooks(index)
    tokens, lengths, mask = encode_records(_TOKENIZER, kind, records)
    group = documents_per_record(kind)
    sizes = np.zeros(len(records) * group, np.int64)  # text per document: a pair's on its first
    sizes[::group] = [record_bytes(r) for r in records]
    write_unit(unit_path(Path(work_dir), index), tokens, lengths, sizes, mask, digest, group)
    return index, len(lengths), len(tokens), os.getpid()


def encode_records(
    tokenizer: Any, kind: str, records: list[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Concatenated ids (each document ends with EOS), per-document lengths, loss mask.

    A preference record is two chat documents, one after the other: its prompt with the
    chosen answer, then the same prompt with the rejected one (:func:`encode_pairs`)."""
    if kind in ("chat", "preference"):
        encoded = (
            encode_pairs(tokenizer, records)
            if kind == "preference"
            else encode_chats(tokenizer, records)
        )
        ids = [e[0] for e in encoded]
        masks = [e[1] for e in encoded]
        mask = np.array(list(chain.from_iterable(masks)), np.uint8)
    else:  # text: arrays end to end (no Python list per token), each document ends with EOS
        eos = np.array([tokenizer.eos_id], np.uint32)
        arrays = getattr(tokenizer, "encode_arrays", None)  # a protocol-only kind: lists
        rows = arrays(records) if arrays else tokenizer.encode_batch(records)
        lengths = np.array([len(row) + 1 for row in rows], np.int64)
        parts = [part for row in rows for part in (np.asarray(row, np.uint32), eos)]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint32), lengths, None
    lengths = np.array([len(row) for row in ids], np.int64)
    tokens = np.array(list(chain.from_iterable(ids)), np.uint32)
    return tokens, lengths, mask


def encode_pairs(tokenizer: Any, records: list[Any]) -> list[tuple[Any, Any]]:
    """``(ids, loss_mask)`` of prompt + chosen, then prompt + rejected, for each record.

    The loss mask covers the chosen (rejected) assistant turns only: assistant turns of a
    multi-turn prompt are shared context, so the tokens the prompt renders to are unmasked.
    """

    pairs = [normalize(record) for record in records]
    chats = [p["prompt"] + p[answer] for p in pairs for answer in ("chosen", "rejected")]
    encoded = encode_chats(tokenizer, chats)
    history = [i for i, p in enumerate(pairs) if any(m["role"] == "assistant" for m in p["prompt"])]
    if history:
        prompts = encode_chats(tokenizer, [pairs[i]["prompt"] for i in history])
        for i, (prompt_ids, _) in zip(history, prompts, strict=True):
            for ids, mask in encoded[2 * i : 2 * i + 2]:
                shared = _common_prefix(prompt_ids, ids)
                mask[:shared] = [0] * shared
    return encoded


def _common_prefix(a: Any, b: Any) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


def write_unit(
    path: Path,
    tokens: np.ndarray,
    lengths: np.ndarray,
    sizes: np.ndarray,
    mask: np.ndarray | None,
    digest: str,
    group: int = 1,
) -> None:
    """Write a unit aside, then rename it into place (a unit file is always complete).
    ``group``: documents per record (2 for preference pairs), kept together downstream."""
    tmp = path.with_name(path.name + PARTIAL_SUFFIX)
    arrays = {"tokens": tokens, "lengths": lengths, "sizes": sizes, "digest": np.array(digest)}
    if group != 1:
        arrays["group"] = np.array(group, np.int64)
    if mask is not None:
        arrays["mask"] = mask
    with open(tmp, "wb") as handle:
        np.savez(handle, allow_pickle=False, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def unit_summary(path: Path) -> tuple[str, int]:
    """(digest, tokens) of a finished unit file."""
    with np.load(path) as data:
        return str(data["digest"]), int(data["lengths"].sum())


class Prefix:
    """Tokens in the longest run of finished units 0..k-1 (finish order varies; this not)."""

    def __init__(self) -> None:
        self.tokens_of: dict[int, int] = {}
        self.units = 0
        self.tokens = 0

    def add(self, index: int, tokens: int) -> None:
        self.tokens_of[index] = tokens
        while self.units in self.tokens_of:
            self.tokens += self.tokens_of[self.units]
            self.units += 1

    def units_for(self, max_tokens: int) -> int:
        """How many leading units hold the first ``max_tokens`` tokens (all when 0)."""
        if not max_tokens:
            return self.units
        total = 0
        for index in range(self.units):
            total += self.tokens_of[index]
            if total >= max_tokens:
                return index + 1
        return self.units


def read_unit(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(tokens, document lengths, document text sizes, loss mask or None) of a unit."""
    with np.load(path) as data:
        mask = data["mask"] if "mask" in data.files else None
        return data["tokens"], data["lengths"], data["sizes"], mask
