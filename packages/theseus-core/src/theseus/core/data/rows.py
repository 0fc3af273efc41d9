"""Rows of a batch from memory-mapped shards: packed windows, padded examples, pairs.

A *packed* row is a window of ``seq_len + 1`` consecutive tokens of one shard (windows do
not overlap; the last partial window of a shard is dropped). A *padded* row is one
document (one chat example) truncated to ``seq_len + 1`` tokens and padded. A *pair* is
two padded rows: a preference pair's chosen document, then its rejected one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from theseus.core.data.reader import Shard


class PackedSource:
    """Non-overlapping windows of ``seq_len + 1`` tokens over the shards of one split."""

    def __init__(self, shards: Sequence[Shard], seq_len: int) -> None:
        self.shards = list(shards)
        self.seq_len = seq_len
        counts = [max(0, (s.num_tokens - 1) // seq_len) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def gather(
        self, windows: np.ndarray, rows: np.ndarray, tokens: np.ndarray, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Copy windows into ``tokens[rows]`` (and ``mask[rows]``); return the document
        starts inside them as (row, offset) arrays, offsets in ``1..seq_len``."""
        t = self.seq_len
        shard_of = np.searchsorted(self.offsets, windows, side="right") - 1
        begins = (windows - self.offsets[shard_of]) * t
        found_rows, found_offsets = [], []
        for shard_index in np.unique(shard_of):
            shard = self.shards[int(shard_index)]
            pick = np.flatnonzero(shard_of == shard_index)
            for i in pick.tolist():
                begin, row = int(begins[i]), int(rows[i])
                tokens[row] = shard.tokens[begin : begin + t + 1]
                if mask is not None:
                    mask[row] = 1 if shard.mask is None else shard.mask[begin : begin + t + 1]
            lo = shard.doc_starts.searchsorted(begins[pick], side="right")
            counts = shard.doc_starts.searchsorted(begins[pick] + t, side="right") - lo
            total = int(counts.sum())
            first = np.cumsum(counts) - counts
            index = np.arange(total) - np.repeat(first - lo, counts)
            found_offsets.append(shard.doc_starts[index] - np.repeat(begins[pick], counts))
            found_rows.append(np.repeat(rows[pick], counts))
        return np.concatenate(found_rows), np.concatenate(found_offsets)


class PaddedSource:
    """One document (example) per row, over the shards of one split."""

    def __init__(self, shards: Sequence[Shard], seq_len: int) -> None:
        self.shards = list(shards)
        self.seq_len = seq_len
        counts = [len(s.doc_starts) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def document(self, index: int, stored_mask: bool = True) -> tuple[np.ndarray, np.ndarray]:
        shard_index = int(np.searchsorted(self.offsets, index, side="right")) - 1
        shard = self.shards[shard_index]
        tokens, mask = shard.document(index - int(self.offsets[shard_index]))
        tokens = tokens[: self.seq_len + 1]
        if mask is None or not stored_mask:
            return tokens, np.ones(len(tokens), np.uint8)
        return tokens, mask[: self.seq_len + 1]


class PairSource:
    """Preference pairs over the shards of one split: documents ``2p`` (chosen) and
    ``2p + 1`` (rejected) of the split are pair ``p`` (the tokenizer stores them so)."""

    def __init__(self, shards: Sequence[Shard], seq_len: int) -> None:
        self.documents = PaddedSource(shards, seq_len)

    def __len__(self) -> int:
        return len(self.documents) // 2

    def pair(
        self, index: int, stored_mask: bool = True
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """(chosen, rejected) as (tokens, mask), each cut to ``seq_len + 1`` tokens like a
        padded row: the prompt comes first and is kept, the answer is cut. A cut answer
        still counts (its log-probability sums over the tokens kept), and an answer cut
        away entirely leaves its row without a learned token."""
        return (
            self.documents.document(2 * index, stored_mask),
            self.documents.document(2 * index + 1, stored_mask),
        )


def batch_arrays(
    inputs: np.ndarray,
    targets: np.ndarray,
    positions: np.ndarray,
    segment_ids: np.ndarray,
    loss_mask: np.ndarray,
) -> dict[str, np.ndarray]:
    """A batch: its [B, T] arrays by name (as ``TrainingData`` describes them)."""
    return dict(
        inputs=inputs,
        targets=targets,
        positions=positions,
        segment_ids=segment_ids,
        loss_mask=loss_mask,
    )


def packed_batch(
    tokens: np.ndarray,
    boundary_rows: np.ndarray,
    boundary_offsets: np.ndarray,
    mask: np.ndarray | None,
    document_masking: bool,
) -> dict[str, np.ndarray]:
    """Batch arrays from packed rows: ``tokens`` [B, T+1]; documents start at
    ``(boundary_rows[k], boundary_offsets[k])`` (offsets in ``1..T``); ``mask`` [B, T+1] is
    the stored loss mask of chat data.

    Vectorized over the flattened batch: a *run* is a stretch of one document in one row;
    segment ids and positions are two ``np.repeat`` over runs (no per-row loop, no scan).
    """
    batch, width = tokens.shape
    t = width - 1
    inputs = tokens[:, :-1]  # views of one [B, T+1] buffer (strided; no copies)
    targets = tokens[:, 1:]
    loss_mask = np.ones((batch, t), np.float32) if mask is None else mask[:, 1:].astype(np.float32)
    if not document_masking:
        segment_ids = np.ones((batch, t), np.int32)
        positions = np.broadcast_to(np.arange(t, dtype=np.int32), (batch, t)).copy()
    else:
        flat = boundary_rows * t + boundary_offsets  # flat index of each document start
        inside = boundary_offsets < t
        run_starts = np.sort(np.concatenate([np.arange(batch) * t, flat[inside]]))
        lengths = np.diff(np.append(run_starts, batch * t))
        row_first = np.searchsorted(run_starts, np.arange(batch) * t)
        run_segment = np.arange(len(run_starts)) - row_first[run_starts // t] + 1
        segment_ids = np.repeat(run_segment.astype(np.int32), lengths).reshape(batch, t)
        starts = np.repeat(run_starts.astype(np.int32), lengths)
        positions = (np.arange(batch * t, dtype=np.int32) - starts).reshape(batch, t)
        loss_mask.reshape(-1)[flat - 1] = 0.0  # the target there starts another document
    return batch_arrays(inputs, targets, positions, segment_ids, loss_mask)


def padded_batch(
    examples: Sequence[tuple[np.ndarray, np.ndarray]], seq_len: int, pad_id: int, side: str
) -> dict[str, np.ndarray]:
    """Batch arrays from (tokens, mask) examples, one per row, padded ``left``/``right``."""
    b, t = len(examples), seq_len
    inputs = np.full((b, t), pad_id, np.int32)
    targets = np.full((b, t), pad_id, np.int32)
    positions = np.zeros((b, t), np.int32)
    segment_ids = np.zeros((b, t), np.int32)
    loss_mask = np.zeros((b, t), np.float32)
    for row, (tokens, mask) in enumerate(examples):
        n = len(tokens) - 1
        if n <= 0:
            continue
        span = slice(0, n) if side == "right" else slice(t - n, t)
        inputs[row, span] = tokens[:-1]
        targets[row, span] = tokens[1:]
        positions[row, span] = np.arange(n)
        segment_ids[row, span] = 1
        loss_mask[row, span] = mask[1:]
    return batch_arrays(inputs, targets, positions, segment_ids, loss_mask)
