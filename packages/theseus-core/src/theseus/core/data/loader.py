"""TrainingData: the batches a trainer consumes, a pure function of (seed, step)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import grain
import numpy as np
from theseus.core.data.errors import DataError
from theseus.core.data.reader import TokenizedDataset
from theseus.core.data.rows import (
    PackedSource,
    PaddedSource,
    PairSource,
    packed_batch,
    padded_batch,
)
from theseus.core.data.sampling import RowSampler, host_rows

LAYOUTS = ("packed", "padded", "pairs")
_ENDLESS = 2**62


class TrainingData:
    """Batches of one or more tokenized datasets (a weighted mixture when several).

    ``batch(step)`` is this process's contiguous slice of the global batch at ``step``;
    the slices of all processes concatenate to the same global batch whatever their count.
    A batch is a dict of [B, T] arrays:

    * ``inputs``, ``targets`` (int32): tokens, and the same shifted by one;
    * ``positions`` (int32): restart at 0 in each document when document masking is on;
    * ``segment_ids`` (int32): 0 = padding, else the document's index within its row;
    * ``loss_mask`` (float32): 0 on padding, on targets in another document than their
      input, and (chat data, ``loss_on="assistant"``) outside assistant turns.

    Layouts: ``packed`` (windows of concatenated documents), ``padded`` (one chat example
    per row) and ``pairs`` (preference data only, for DPO-style jobs): rows ``2p`` and
    ``2p + 1`` are pair ``p``'s chosen and rejected documents, padded like ``padded`` rows.
    The pairs layout samples pairs, not documents, and the global batch (in rows) must give
    every process whole pairs.
    """

    def __init__(
        self,
        datasets: Sequence[TokenizedDataset],
        weights: Sequence[float],
        *,
        seq_len: int,
        global_batch_size: int,
        seed: int,
        layout: str = "packed",
        process_index: int = 0,
        process_count: int = 1,
        document_masking: bool = True,
        padding_side: str = "right",
        prefetch: int = 4,
        loss_on: str = "assistant",
    ) -> None:
        if layout not in LAYOUTS:
            raise DataError(f"data layout {layout!r} is unknown; expected one of {LAYOUTS}")
        if padding_side not in ("left", "right"):
            raise DataError(f"data.padding_side is {padding_side!r}; expected 'left' or 'right'")
        if loss_on not in ("assistant", "all"):
            raise DataError(f"data.loss_on is {loss_on!r}; expected 'assistant' or 'all'")
        if global_batch_size % process_count:
            raise DataError(
                f"global batch size {global_batch_size} is not divisible by the "
                f"{process_count} processes"
            )
        if not 0 <= process_index < process_count:
            raise DataError(f"process index {process_index} is not in [0, {process_count})")
        if layout == "pairs" and global_batch_size % 2:
            raise DataError(
                f"global batch size {global_batch_size} is odd: the pairs layout needs two "
                "rows per preference pair (chosen, rejected)"
            )
        if layout == "pairs" and global_batch_size % (2 * process_count):
            raise DataError(
                f"global batch size {global_batch_size} gives each of the {process_count} "
                f"processes {global_batch_size // process_count} rows: the pairs layout needs "
                "an even number (whole pairs) per process"
            )
        for dataset in datasets:
            check_layout(dataset, layout)
        self.datasets = list(datasets)
        self.weights = list(weights)
        self.seq_len = seq_len
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.layout = layout
        self.process_index = process_index
        self.process_count = process_count
        self.document_masking = document_masking
        self.padding_side = padding_side
        self.prefetch = prefetch
        self.use_stored_mask = loss_on == "assistant"
        first = self.datasets[0]
        self.vocab_size = first.vocab_size
        self.eos_id = first.eos_id
        self.pad_id = first.pad_id
        self.tokenizer_dir: Path = first.tokenizer_dir
        self._train = self._sources("train")
        self._train_sampler = RowSampler([len(s) for s in self._train], self.weights, seed)
        self._validation: list | None = None  # opened on first use

    def _sources(self, split: str) -> list[PackedSource | PaddedSource | PairSource]:
        kind = {"packed": PackedSource, "padded": PaddedSource, "pairs": PairSource}[self.layout]
        sources = [kind(d.splits[split], self.seq_len) for d in self.datasets]
        for dataset, source in zip(self.datasets, sources, strict=True):
            if isinstance(source, PairSource) and len(source.documents) % 2:
                raise DataError(
                    f"the {split} split of {dataset.path} holds {len(source.documents)} "
                    "documents, an odd number: not whole preference pairs; tokenize it again"
                )
            if isinstance(source, PairSource) and len(source) == 0:
                raise DataError(f"the {split} split of {dataset.path} holds no preference pair")
            if len(source) == 0:
                tokens = sum(s.num_tokens for s in dataset.splits[split])
                raise DataError(
                    f"the {split} split of {dataset.path} has {tokens} tokens: not one row of "
                    f"seq_len {self.seq_len} + 1 fits; use more documents or a shorter sequence"
                )
        return sources

    @property
    def local_batch_size(self) -> int:
        return self.global_batch_size // self.process_count

    # ------------------------------------------------------------------ batches
    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's slice of the global batch at ``step``."""
        return self._build(self._train, self._train_sampler(self._items(step)))

    def iterator(self, start_step: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """``batch(start_step), batch(start_step + 1), ...`` prepared ahead by a background
        thread (``data.prefetch`` batches)."""
        steps = grain.MapDataset.range(start_step, _ENDLESS).map(self.batch)
        inline = steps.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        prefetched = grain.experimental.ThreadPrefetchIterDataset(
            inline, prefetch_buffer_size=max(1, self.prefetch)
        )
        return iter(prefetched)

    def validation_batches(self, num_batches: int) -> list[dict[str, np.ndarray]]:
        """A fixed validation stream (unshuffled): the same batches on every call."""
        if self._validation is None:
            self._validation = self._sources("validation")
            lengths = [len(s) for s in self._validation]
            self._validation_sampler = RowSampler(lengths, self.weights, self.seed, shuffle=False)
        out = []
        for index in range(num_batches):
            items = self._items(index)
            out.append(self._build(self._validation, self._validation_sampler(items)))
        return out

    def _items(self, step: int) -> np.ndarray:
        """The global item indices this process reads at ``step``: one per row, or (pairs
        layout) one per pair, each pair filling two consecutive rows."""
        per_item = 2 if self.layout == "pairs" else 1
        items = self.global_batch_size // per_item
        return host_rows(step, items, self.process_index, self.process_count)

    def _build(self, sources, picks: list[tuple[int, int]]) -> dict[str, np.ndarray]:
        if self.layout == "pairs":  # row 2p: pair p's chosen document; row 2p + 1: rejected
            stored = self.use_stored_mask
            examples = [doc for s, i in picks for doc in sources[s].pair(i, stored)]
            return padded_batch(examples, self.seq_len, self.pad_id, self.padding_side)
        if self.layout == "padded":
            examples = [sources[s].document(i, self.use_stored_mask) for s, i in picks]
            return padded_batch(examples, self.seq_len, self.pad_id, self.padding_side)
        width = self.seq_len + 1
        tokens = np.empty((len(picks), width), np.int32)
        with_mask = self.use_stored_mask and any(d.has_mask for d in self.datasets)
        mask = np.empty((len(picks), width), np.uint8) if with_mask else None
        source_of = np.array([s for s, _ in picks], np.int64)
        items = np.array([i for _, i in picks], np.int64)
        found = [
            sources[int(s)].gather(items[rows], rows, tokens, mask)
            for s in np.unique(source_of)
            for rows in [np.flatnonzero(source_of == s)]
        ]
        boundary_rows = np.concatenate([r for r, _ in found])
        boundary_offsets = np.concatenate([o for _, o in found])
        return packed_batch(tokens, boundary_rows, boundary_offsets, mask, self.document_masking)


def check_layout(dataset: TokenizedDataset, layout: str) -> None:
    """Preference pairs are read with the pairs layout, and only they are."""
    if layout == "pairs" and not dataset.holds_pairs:
        raise DataError(
            f"dataset {dataset.name!r} ({dataset.path}) holds {dataset.kind} documents, not "
            "preference pairs: the pairs layout (preference training) needs a dataset of kind "
            "'preference', e.g. addition-preference or preference-jsonl"
        )
    if layout != "pairs" and dataset.holds_pairs:
        raise DataError(
            f"dataset {dataset.name!r} ({dataset.path}) holds preference pairs: train on it "
            f"with a preference job (layout 'pairs'), not the {layout!r} layout"
        )
