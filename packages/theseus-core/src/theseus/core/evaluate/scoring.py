"""Log-likelihoods of token sequences under a model, batched and padded.

Each sequence is scored on its own: padding rows and padded positions carry segment id 0,
so they never attend to (or are attended by) real tokens, and positions restart at 0 in
every sequence. A score therefore does not depend on the batch size, on the other
sequences of its batch, nor on the side padding is added.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.core.evaluate.errors import EvaluationError

Request = tuple[Sequence[int], Sequence[int]]  # (context ids, continuation ids)


@partial(jax.jit, static_argnums=0)  # one compilation per model graph and batch shape
def _score(graphdef: Any, state: Any, tokens, positions, segments, targets) -> tuple:
    model = nnx.merge(graphdef, state)
    logits_BxTxV = model(tokens, positions=positions, segment_ids=segments).astype(jnp.float32)
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV, axis=-1)
    logp_BxT = jnp.take_along_axis(logp_BxTxV, targets[..., None], axis=-1)[..., 0]
    greedy_BxT = jnp.argmax(logits_BxTxV, axis=-1) == targets
    return logp_BxT, greedy_BxT


def bucket(length: int, limit: int) -> int:
    """Padded width of a batch: the next power of two (at least 16), at most ``limit``."""
    width = 16
    while width < length:
        width *= 2
    return min(width, limit)


class Scorer:
    """Scores sequences with one model; batches have a fixed number of rows."""

    def __init__(
        self, model: Any, batch_size: int, pad_id: int = 0, padding_side: str = "right"
    ) -> None:
        if batch_size <= 0:
            raise EvaluationError(f"evaluation batch size is {batch_size}; it must be > 0")
        if padding_side not in ("left", "right"):
            raise EvaluationError(f"padding side {padding_side!r}: use 'left' or 'right'")
        self.model = model
        self.batch_size = batch_size
        self.pad_id = pad_id
        self.padding_side = padding_side
        self.max_len = model.config.max_seq_len
        self.graphdef, self.state = nnx.split(model)

    # ------------------------------------------------------------------ rows
    def token_logprobs(
        self, inputs, targets, positions=None, segments=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-token log-probabilities of ``targets`` and whether each is the argmax (NxT).

        Rows are processed ``batch_size`` at a time; the last batch is filled with padding.
        """
        inputs = np.asarray(inputs, np.int32)
        n, width = inputs.shape
        if segments is None:
            segments = np.ones_like(inputs)
        if positions is None:
            positions = np.broadcast_to(np.arange(width, dtype=np.int32), inputs.shape)
        arrays = [inputs, np.asarray(positions, np.int32), np.asarray(segments, np.int32)]
        arrays.append(np.asarray(targets, np.int32))
        logps, greedys = [], []
        for start in range(0, n, self.batch_size):
            chunk = [a[start : start + self.batch_size] for a in arrays]
            rows = chunk[0].shape[0]
            if rows < self.batch_size:
                fill = self.batch_size - rows
                chunk = [np.pad(a, ((0, fill), (0, 0))) for a in chunk]
                chunk[0][rows:] = self.pad_id
            logp, greedy = _score(self.graphdef, self.state, *chunk)
            logps.append(np.asarray(logp)[:rows])
            greedys.append(np.asarray(greedy)[:rows])
        return np.concatenate(logps), np.concatenate(greedys)

    # ------------------------------------------------------------------ requests
    def loglikelihood(self, requests: Sequence[Request]) -> list[tuple[float, bool, int]]:
        """``(sum of log p(continuation | context), continuation is greedy, its length)``.

        Sequences longer than the model's ``max_seq_len`` + 1 lose their oldest context.
        """
        rows = []
        for context, continuation in requests:
            if not context or not continuation:
                raise EvaluationError("a scored request needs a non-empty context and continuation")
            if len(continuation) > self.max_len:
                raise EvaluationError(
                    f"a continuation of {len(continuation)} tokens does not fit the model's "
                    f"max_seq_len={self.max_len}"
                )
            sequence = (list(context) + list(continuation))[-(self.max_len + 1) :]
            rows.append((sequence, len(continuation)))
        order = sorted(range(len(rows)), key=lambda i: (-len(rows[i][0]), i))
        results: list[tuple[float, bool, int]] = [(0.0, False, 0)] * len(rows)
        for start in range(0, len(order), self.batch_size):
            picked = order[start : start + self.batch_size]
            width = bucket(max(len(rows[i][0]) - 1 for i in picked), self.max_len)
            arrays, spans = self._pack([rows[i][0] for i in picked], width)
            logp, greedy = self.token_logprobs(*arrays)
            for row, i in enumerate(picked):
                begin, end = spans[row]
                count = rows[i][1]
                scored = slice(end - count, end)
                total = float(np.sum(logp[row, scored], dtype=np.float64))
                results[i] = (total, bool(np.all(greedy[row, scored])), count)
        return results

    def _pack(self, sequences: list[list[int]], width: int) -> tuple[list[np.ndarray], list]:
        """Inputs, targets, positions, segments (rows x width) and each row's span."""
        n = len(sequences)
        inputs = np.full((n, width), self.pad_id, np.int32)
        targets = np.zeros((n, width), np.int32)
        positions = np.zeros((n, width), np.int32)
        segments = np.zeros((n, width), np.int32)
        spans = []
        for row, sequence in enumerate(sequences):
            length = len(sequence) - 1
            begin = 0 if self.padding_side == "right" else width - length
            span = slice(begin, begin + length)
            inputs[row, span] = sequence[:-1]
            targets[row, span] = sequence[1:]
            positions[row, span] = np.arange(length)
            segments[row, span] = 1
            spans.append((begin, begin + length))
        return [inputs, targets, positions, segments], spans
