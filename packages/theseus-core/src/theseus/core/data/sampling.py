"""Which item each global row reads: a pure function of (seed, row), built on Grain.

Row ``r`` of step ``s`` is global row ``s * global_batch + r``. A single dataset reads
item ``perm_e[r mod n]`` where ``e = r // n`` and ``perm_e`` is a permutation drawn from
(seed, e): a numpy permutation (vectorized, cached per epoch) up to 16M items, beyond
that Grain's O(1)-memory ``index_shuffle`` (the function behind
``grain.MapDataset.shuffle``). A mixture uses ``grain.MapDataset.mix`` over shuffled
Grain datasets, whose selection is closed-form in the row index. Nothing depends on
iterator history.
"""

from __future__ import annotations

from collections.abc import Sequence

import grain
import numpy as np
from theseus.core.data.errors import DataError

_index_shuffle = grain.experimental.index_shuffle


def shuffled_index(row: int, length: int, seed: int) -> int:
    """Position ``row`` of an endless sequence of per-epoch permutations of ``range(length)``."""
    epoch, index = divmod(row, length)
    if length == 1:
        return 0
    return _index_shuffle(index, max_index=length - 1, seed=(seed + epoch) % 2**32, rounds=4)


PERMUTATION_LIMIT = 1 << 24


class EpochPermutations:
    """``perm_e[i]`` for arrays of rows; the last two epochs' permutations are cached."""

    def __init__(self, length: int, seed: int) -> None:
        self.length = length
        self.seed = seed
        self._cache: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        perm = self._cache.get(epoch)
        if perm is None:
            rng = np.random.default_rng([self.seed % 2**63, epoch])
            perm = rng.permutation(self.length).astype(np.int64)
            self._cache = {e: p for e, p in self._cache.items() if e >= epoch - 1}
            self._cache[epoch] = perm
        return perm

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        epochs, index = np.divmod(rows, self.length)
        if self.length > PERMUTATION_LIMIT:
            return np.array([shuffled_index(int(r), self.length, self.seed) for r in rows])
        out = np.empty_like(index)
        for epoch in np.unique(epochs):
            where = epochs == epoch
            out[where] = self.permutation(int(epoch))[index[where]]
        return out


class RowSampler:
    """Maps global row indices to (source index, item index) pairs."""

    def __init__(
        self, lengths: Sequence[int], weights: Sequence[float], seed: int, shuffle: bool = True
    ):
        if any(n <= 0 for n in lengths):
            raise DataError("a dataset in the mix has no complete row for this sequence length")
        self.lengths = list(lengths)
        self.seed = seed
        self.shuffle = shuffle
        self._mix = None
        self._single = EpochPermutations(self.lengths[0], seed)
        if len(lengths) > 1:
            parts = []
            for i, n in enumerate(lengths):
                part = grain.MapDataset.range(n)
                if shuffle:
                    part = part.shuffle(seed=(seed + 1_000_003 * i) % 2**32)
                else:
                    part = part.repeat(None)
                parts.append(part.map(_Tag(i)))
            self._mix = grain.MapDataset.mix(parts, weights=list(weights))

    def __call__(self, rows: Sequence[int]) -> list[tuple[int, int]]:
        if self._mix is not None:
            return [self._mix[int(r)] for r in rows]
        n = self.lengths[0]
        if not self.shuffle:
            return [(0, int(r) % n) for r in rows]
        return [(0, i) for i in self._single(np.asarray(rows, np.int64)).tolist()]


class _Tag:
    """Tags an item index with its source (a picklable module-level callable)."""

    def __init__(self, source: int) -> None:
        self.source = source

    def __call__(self, index: int) -> tuple[int, int]:
        return self.source, int(index)


def host_rows(step: int, global_batch: int, process_index: int, process_count: int) -> np.ndarray:
    """The global row indices this process reads at ``step`` (a contiguous slice)."""
    local = global_batch // process_count
    first = step * global_batch + process_index * local
    return np.arange(first, first + local, dtype=np.int64)
