"""Pieces the training benchmarks share: a synthetic packed batch and a timed step loop."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def synthetic_batch(batch: int, seq_len: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random tokens in the trainer's batch format, one document per row."""
    tokens = np.random.default_rng(seed).integers(0, vocab, (batch, seq_len + 1)).astype(np.int32)
    positions = np.broadcast_to(np.arange(seq_len, dtype=np.int32), (batch, seq_len)).copy()
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": positions,
        "segment_ids": np.ones((batch, seq_len), np.int32),
        "loss_mask": np.ones((batch, seq_len), np.float32),
    }


def timed_steps(
    step: Any, state: Any, batch: Any, warmup: int, steps: int
) -> tuple[Any, Any, float]:
    """Run ``warmup`` untimed steps, then ``steps`` timed ones; (state, metrics, seconds)."""
    for _ in range(warmup):
        state, metrics = step(state, batch)
    metrics["loss"].block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    metrics["loss"].block_until_ready()
    return state, metrics, time.perf_counter() - start
