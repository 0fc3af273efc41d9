"""Perplexity and bits-per-byte on the validation split of tokenized data (the run's own,
or ``dataset``: any tokenized dataset under ``<root>/data``, e.g. for imported weights).

``loss`` is the mean cross entropy (nats) over the scored tokens, ``perplexity`` its
exponential; ``bits_per_byte`` divides the summed loss in bits by the UTF-8 bytes those
tokens decode to (special tokens count zero bytes), so it compares across tokenizers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from theseus.core.data.api import find_dataset, open_training_data
from theseus.core.data.loader import TrainingData
from theseus.core.data.reader import TokenizedDataset
from theseus.core.data.rows import PackedSource, PaddedSource
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.target import EvalTarget


def _open_data(config: Any, target: EvalTarget, seq_len: int) -> Any:
    """``config.dataset`` (packed), else the run's data, with this evaluation's batch size."""
    if config.dataset:
        dataset = TokenizedDataset(find_dataset(target.root, config.dataset))
        if dataset.vocab_size > target.model.config.vocab_size:
            raise EvaluationError(
                f"{dataset.path} was tokenized with {dataset.vocab_size} tokens; the model has "
                f"vocab_size={target.model.config.vocab_size}: tokenize it with the model's tokenizer"
            )
        return TrainingData([dataset], [1.0], seq_len=seq_len, batch=target.batch_size, seed=0)
    if target.data is None:
        raise EvaluationError(
            "val-ppl on imported weights needs evaluate.options.val-ppl.dataset: a dataset "
            "under <root>/data tokenized with the model's tokenizer"
        )

    return open_training_data(
        target.root,
        target.data,
        seq_len=seq_len,
        batch=target.batch_size,
        seed=target.seed,
        layout=target.layout,
    )


def _open_validation(config: Any, target: EvalTarget, seq_len: int) -> tuple[Any, int]:
    """The data to read, and its number of validation rows (at most ``config.rows``)."""

    data = _open_data(config, target, seq_len)
    if len(data.datasets) > 1:
        return data, config.rows
    kind = PackedSource if data.layout == "packed" else PaddedSource
    available = len(kind(data.datasets[0].splits["validation"], seq_len))
    if available == 0:
        raise EvaluationError(
            f"the validation split of {data.datasets[0].path} has no row of {seq_len} tokens"
        )
    return data, min(config.rows, available)


def token_bytes(target: EvalTarget, targets: np.ndarray, mask: np.ndarray) -> int:
    """UTF-8 bytes of the scored targets, row by row, special tokens excluded."""
    special = np.array(sorted(target.special_ids()), np.int64)
    total = 0
    for row, keep in zip(targets, mask > 0, strict=True):
        ids = row[keep & ~np.isin(row, special)]
        if ids.size:
            total += len(target.tokenizer.decode(ids.tolist()).encode("utf-8"))
    return total


def run(config: Any, target: EvalTarget) -> dict[str, float]:
    seq_len = config.seq_len or target.seq_len or target.max_len
    if seq_len > target.max_len:
        raise EvaluationError(f"val-ppl seq_len={seq_len} exceeds max_seq_len={target.max_len}")
    data, rows = _open_validation(config, target, seq_len)
    if target.limit:
        rows = min(rows, int(target.limit))
    batches = data.validation_batches(math.ceil(rows / target.batch_size))
    batch = {k: np.concatenate([b[k] for b in batches])[:rows] for k in batches[0]}
    logp, _ = target.scorer.token_logprobs(
        batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"]
    )
    mask = batch["loss_mask"] > 0
    nats = float(-np.sum(np.where(mask, logp, 0.0), dtype=np.float64))
    tokens = int(mask.sum())
    num_bytes = token_bytes(target, batch["targets"], mask)
    if tokens == 0 or num_bytes == 0:
        raise EvaluationError("val-ppl found no scored tokens in the validation rows")
    loss = nats / tokens
    return {
        "loss": loss,
        "perplexity": math.exp(loss),
        "bits_per_byte": nats / (math.log(2) * num_bytes),
        "tokens": tokens,
        "bytes": num_bytes,
        "rows": rows,
    }
