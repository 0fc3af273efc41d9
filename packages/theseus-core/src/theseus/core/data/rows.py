"""Rows of a batch from memory-mapped shards: packed windows and padded examples.

A *packed* row is a window of ``seq_len + 1`` consecutive tokens of one shard (windows do
not overlap; the last partial window of a shard is dropped). A *padded* row is one
document (one chat example) truncated to ``seq_len + 1`` tokens and padded.
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

    def fill(self, window: int, tokens: np.ndarray, starts: np.ndarray, mask: np.ndarray) -> None:
        """Write window ``window`` into one row of ``tokens``/``starts``/``mask`` (T+1 each)."""
        t = self.seq_len
        shard_index = int(np.searchsorted(self.offsets, window, side="right")) - 1
        shard = self.shards[shard_index]
        begin = (window - int(self.offsets[shard_index])) * t
        tokens[:] = shard.tokens[begin : begin + t + 1]
        docs = shard.doc_starts
        lo = int(np.searchsorted(docs, begin, side="right"))
        hi = int(np.searchsorted(docs, begin + t, side="right"))
        starts[:] = False
        starts[docs[lo:hi] - begin] = True
        if shard.mask is not None:
            mask[:] = shard.mask[begin : begin + t + 1]
        else:
            mask[:] = 1


class PaddedSource:
    """One document (example) per row, over the shards of one split."""

    def __init__(self, shards: Sequence[Shard], seq_len: int) -> None:
        self.shards = list(shards)
        self.seq_len = seq_len
        counts = [len(s.doc_starts) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def document(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        shard_index = int(np.searchsorted(self.offsets, index, side="right")) - 1
        shard = self.shards[shard_index]
        tokens, mask = shard.document(index - int(self.offsets[shard_index]))
        tokens = tokens[: self.seq_len + 1]
        mask = mask[: self.seq_len + 1] if mask is not None else np.ones(len(tokens), np.uint8)
        return tokens, mask


def packed_batch(
    tokens: np.ndarray, starts: np.ndarray, mask: np.ndarray, document_masking: bool
) -> dict[str, np.ndarray]:
    """Batch arrays from packed rows: ``tokens``/``starts``/``mask`` are [B, T+1]."""
    batch, width = tokens.shape
    t = width - 1
    inputs = tokens[:, :-1]
    targets = tokens[:, 1:]
    loss_mask = mask[:, 1:].astype(np.float32)
    if document_masking:
        segments = np.cumsum(starts, axis=1, dtype=np.int32) + 1
        segment_ids = segments[:, :-1]
        loss_mask *= segments[:, 1:] == segment_ids
        index = np.arange(t, dtype=np.int32)
        last_start = np.maximum.accumulate(np.where(starts[:, :-1], index, 0), axis=1)
        positions = index - last_start
    else:
        segment_ids = np.ones((batch, t), np.int32)
        positions = np.broadcast_to(np.arange(t, dtype=np.int32), (batch, t)).copy()
    return {
        "inputs": np.ascontiguousarray(inputs, dtype=np.int32),
        "targets": np.ascontiguousarray(targets, dtype=np.int32),
        "positions": positions.astype(np.int32, copy=False),
        "segment_ids": np.ascontiguousarray(segment_ids, dtype=np.int32),
        "loss_mask": loss_mask,
    }


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
    return {
        "inputs": inputs,
        "targets": targets,
        "positions": positions,
        "segment_ids": segment_ids,
        "loss_mask": loss_mask,
    }
