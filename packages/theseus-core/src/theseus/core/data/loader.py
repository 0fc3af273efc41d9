"""TrainingData: the batches a trainer consumes, a pure function of (seed, step).

Data still being tokenized is read as it is published: a step whose rows are not there yet
waits (:mod:`theseus.core.data.stream`), and what it reads is what a run started after the
tokenization reads (:mod:`theseus.core.data.sampling`, :mod:`theseus.core.data.mixture`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import grain
import numpy as np
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.data.errors import DataError
from theseus.core.data.mixture import Mixture, Stage, normalized
from theseus.core.data.reader import TokenizedDataset
from theseus.core.data.rows import (
    PackedSource,
    PaddedSource,
    PairSource,
    packed_batch,
    padded_batch,
)
from theseus.core.data.sampling import BlockSampler, in_order
from theseus.core.data.stream import Stream, Waits

LAYOUTS = ("packed", "padded", "pairs")
_ENDLESS = 2**62
DEFAULT_SHUFFLE_ROWS = 65536


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
    The pairs layout samples pairs, not documents. ``batch`` is the run's
    :class:`~theseus.core.data.batch_plan.BatchPlan` (its global rows and processes; whole
    pairs everywhere), or a row count for one process.

    Several datasets mix with ``weights``, or by ``stages`` (:class:`Stage`: weights that
    change at given steps); ``shuffle_rows`` is the block of the first pass's shuffle.
    ``padding_side`` and ``loss_on`` are the run's ``data`` options, checked (one of their
    choices) when its ``DataConfig`` is built.
    """

    def __init__(
        self,
        datasets: Sequence[TokenizedDataset],
        weights: Sequence[float],
        *,
        seq_len: int,
        batch: BatchPlan | int,
        seed: int,
        layout: str = "packed",
        process_index: int = 0,
        document_masking: bool = True,
        padding_side: str = "right",
        prefetch: int = 4,
        loss_on: str = "assistant",
        shuffle_rows: int = DEFAULT_SHUFFLE_ROWS,
        stages: Sequence[Stage] | None = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise DataError(f"data layout {layout!r} is unknown; expected one of {LAYOUTS}")
        if isinstance(batch, int):  # one process, one micro-step: standalone use
            batch = BatchPlan.of(batch, pairs=layout == "pairs")
        if batch.pairs != (layout == "pairs"):
            raise DataError(
                f"the batch plan {'splits' if batch.pairs else 'does not split'} rows in "
                f"pairs but the layout is {layout!r}"
            )
        if not 0 <= process_index < batch.processes:
            raise DataError(f"process index {process_index} is not in [0, {batch.processes})")
        if shuffle_rows < 0:
            raise DataError(f"data.shuffle_rows is {shuffle_rows}; expected >= 0 (0: global)")
        for dataset in datasets:
            check_layout(dataset, layout)
        self.datasets = list(datasets)
        self.weights = list(weights)
        self.shuffle_rows = shuffle_rows
        self.seq_len = seq_len
        self.plan = batch
        self.global_batch_size = batch.global_rows
        self.seed = seed
        self.layout = layout
        self.process_index = process_index
        self.process_count = batch.processes
        self.document_masking = document_masking
        self.padding_side = padding_side
        self.prefetch = prefetch
        self.use_stored_mask = loss_on == "assistant"
        first = self.datasets[0]
        self.vocab_size = first.vocab_size
        self.eos_id = first.eos_id
        self.pad_id = first.pad_id
        self.tokenizer_dir: Path = first.tokenizer_dir
        self.waits = Waits()  # what reading data still being tokenized waited for
        self.items_per_step = batch.items
        if stages is None:
            stages = [Stage(0, None, normalized(self.weights, "the mixture"))]
        self.mixture = Mixture(stages, self.items_per_step, seed)
        self._train = self._streams("train")
        self._samplers = [
            BlockSampler(seed, shuffle_rows, tag=i) for i in range(len(self.datasets))
        ]
        self._validation: list[Stream] | None = None  # opened on first use

    def _streams(self, split: str) -> list[Stream]:
        kind = {"packed": PackedSource, "padded": PaddedSource, "pairs": PairSource}[self.layout]
        make_source = partial(kind, seq_len=self.seq_len)
        streams = [Stream(d, split, make_source, self.waits) for d in self.datasets]
        for dataset, stream in zip(self.datasets, streams, strict=True):
            if dataset.complete:
                self._check_source(dataset, split, stream.source)
        return streams

    def _check_source(self, dataset: TokenizedDataset, split: str, source) -> None:
        """A complete split must give at least one row (whole pairs for the pairs layout)."""
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

    @property
    def local_batch_size(self) -> int:
        return self.global_batch_size // self.process_count

    # ------------------------------------------------------------------ batches
    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's slice of the global batch at ``step``."""
        return self._build(self._train, self._picks(step, self.mixture, self._train, True))

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
        """A fixed validation stream (unshuffled; a mixture with the first stage's weights):
        the same batches on every call."""
        if self._validation is None:
            self._validation = self._streams("validation")
            first = self.mixture.stages[0].weights
            self._validation_mixture = Mixture(
                [Stage(0, None, first)], self.items_per_step, self.seed
            )
        out = []
        for index in range(num_batches):
            picks = self._picks(index, self._validation_mixture, self._validation, False)
            out.append(self._build(self._validation, picks))
        return out

    def step_metrics(self, step: int) -> dict[str, float]:
        """What a trainer logs of the data at ``step``: each dataset's realized share of
        the items so far (``data/mix/<dataset>``, mixtures only) and the seconds spent
        waiting for the tokenization (``data/wait_s``, once there was a wait)."""
        out: dict[str, float] = {}
        if len(self.datasets) > 1:
            shares = self.mixture.realized(step)
            for dataset, share in zip(self.datasets, shares.tolist(), strict=True):
                out[f"data/mix/{dataset.name}"] = share
        if self.waits.episodes:
            out["data/wait_s"] = self.waits.seconds
        return out

    @property
    def status(self) -> str | None:
        """What the loader waits for now (``waiting for ...: unit 3 of 12``), or None."""
        return self.waits.status

    def _picks(
        self, step: int, mixture: Mixture, streams: list[Stream], shuffle: bool
    ) -> list[tuple[int, int]]:
        """(dataset, item) of each of this process's items at ``step``: one per row, or
        (pairs layout) one per pair, each pair filling two consecutive rows."""
        source, rows = mixture.assign(step)
        local = self.items_per_step // self.process_count
        first = self.process_index * local
        source, rows = source[first : first + local], rows[first : first + local]
        items = np.empty_like(rows)
        for d in np.unique(source).tolist():
            where = np.flatnonzero(source == d)
            if shuffle:
                items[where] = self._samplers[d](rows[where], streams[d])
            else:
                items[where] = in_order(rows[where], streams[d])
        return list(zip(source.tolist(), items.tolist(), strict=True))

    def _build(self, streams: list[Stream], picks: list[tuple[int, int]]) -> dict[str, np.ndarray]:
        sources = [stream.source for stream in streams]
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
