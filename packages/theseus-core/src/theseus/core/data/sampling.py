"""Which item each row reads: a pure function of (seed, row) and the items before it.

Row ``r`` of step ``s`` is global row ``s * global_batch + r`` (a mixture first assigns
each global row to a dataset and a row of that dataset, :mod:`theseus.core.data.mixture`).
A dataset's row reads an item (window, document or pair) through :class:`BlockSampler`:
the first pass shuffles within fixed blocks of items, so a row needs only the items up to
its block, and later passes permute everything. Permutations are numpy's (vectorized,
cached) up to 16M items, beyond that Grain's O(1)-memory ``index_shuffle`` (the function
behind ``grain.MapDataset.shuffle``). Nothing depends on iterator history or on how many
items exist yet.
"""

from __future__ import annotations

from typing import Any

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


class BlockSampler:
    """Which item (window, document or pair) local row ``r`` of one dataset reads.

    The first pass over the data goes block by block: block ``g`` is rows ``[gW, (g+1)W)``
    (``W = block`` rows) and reads items ``[gW, (g+1)W)`` in an order drawn from
    (seed, g). So row ``r`` needs only the first ``(g+1)W`` items to exist, however many
    exist already; the last block is cut to the items there are, known once the data is
    complete. Later passes (epochs ``e >= 1``) read a permutation of all ``N`` items drawn
    from (seed, e); a dataset of one block (``N <= W``, or ``block=0``: a global shuffle that
    waits for the whole dataset) reads the permutation drawn from (seed, 0) in its first
    pass too, the order a complete dataset always had. Items arrive in a fixed order and never change, so a run reading
    while the data is tokenized reads what a run started after it reads.
    """

    def __init__(self, seed: int, block: int, tag: int = 0) -> None:
        self.seed = (seed + 1_000_003 * tag) % 2**63
        self.block = block
        self._later: EpochPermutations | None = None
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, rows: np.ndarray, stream: Any) -> np.ndarray:
        """Items of ``rows`` (int64); ``stream`` (``ensure(count)``, ``known()``) waits for
        the items a block needs."""
        rows = np.asarray(rows, np.int64)
        out = np.empty_like(rows)
        width = self.block or 2**62
        blocks = rows // width
        for g in np.unique(blocks).tolist():
            where = np.flatnonzero(blocks == g)
            picked, first = rows[where], g * width
            need = first + width
            stream.ensure(need)
            known = stream.known()
            if known >= need:
                out[where] = first + self._permute(g, width, picked - first)
                continue
            if known == 0:
                raise DataError(f"{stream.describe()} has no complete row")
            if self._later is None or self._later.length != known:
                self._later = EpochPermutations(known, self.seed)
            inside = picked < known  # the last, partial block of the first pass
            if inside.any() and g == 0:  # the whole dataset in one block: epoch 0's
                out[where[inside]] = self._later(picked[inside])  # permutation, as before
            elif inside.any():
                size = known - first
                out[where[inside]] = first + self._permute(g, size, picked[inside] - first)
            if (~inside).any():
                out[where[~inside]] = self._later(picked[~inside])
        return out

    def _permute(self, block: int, size: int, index: np.ndarray) -> np.ndarray:
        """``perm[index]`` for the permutation of ``range(size)`` drawn for ``block``."""
        if size > PERMUTATION_LIMIT:
            seed = hash_seed(self.seed, block) % 2**32
            return np.array(
                [_index_shuffle(int(i), max_index=size - 1, seed=seed, rounds=4) for i in index],
                np.int64,
            )
        key = (block, size)
        perm = self._cache.get(key)
        if perm is None:
            rng = np.random.default_rng([self.seed, BLOCK_STREAM, block, size])
            perm = rng.permutation(size).astype(np.int64)
            self._cache = {k: v for k, v in self._cache.items() if k[0] >= block - 1}
            self._cache[key] = perm
        return perm[index]


def in_order(rows: np.ndarray, stream: Any) -> np.ndarray:
    """Unshuffled items (the validation stream): row ``r`` reads item ``r``, from the start
    again past the end (which needs the data complete)."""
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return rows
    stream.ensure(int(rows.max()) + 1)
    known = stream.known()
    if known == 0:
        raise DataError(f"{stream.describe()} has no complete row")
    return rows % known if int(rows.max()) >= known else rows


BLOCK_STREAM = 0xB10C  # separates the first pass's block permutations from later epochs'


def hash_seed(*parts: int) -> int:
    """A 63-bit integer drawn from ``parts`` (for seeds that combine several numbers)."""
    return int(np.random.default_rng([int(p) % 2**63 for p in parts]).integers(0, 2**63))


def host_rows(step: int, global_batch: int, process_index: int, process_count: int) -> np.ndarray:
    """The global row indices this process reads at ``step`` (a contiguous slice)."""
    local = global_batch // process_count
    first = step * global_batch + process_index * local
    return np.arange(first, first + local, dtype=np.int64)
