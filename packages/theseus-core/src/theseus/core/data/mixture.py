"""Which dataset each row of a step comes from: a mixture, its weights changing by stage.

Training is cut into stages (``data.mixture_schedule``; one stage for ``data.mixture``). At
step ``s`` of stage ``k`` the ``B`` items of the global batch are split among the datasets
by a multinomial draw with the stage's weights, from a generator seeded by (seed, k, the
chunk of 1024 steps holding ``s``); a permutation drawn from (seed, s) places them in the
batch. Dataset ``d``'s rows at step ``s`` are its rows ``A_d(s), A_d(s) + 1, ...`` where
``A_d(s)`` counts its items in steps before ``s`` (sums over whole chunks, cached), so
each dataset is read in its own order without gaps or repeats.

Everything is a function of (seed, step, the schedule, ``B``): a resumed run, or one on
another number of hosts (each takes its slice of the same global batch), reads the same
rows. Each item comes from dataset ``d`` with probability ``w_d``, independently, so
after ``n`` items the realized share of ``d`` is within sampling error of ``w_d``
(binomial: standard deviation ``sqrt(w_d (1 - w_d) / n)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from theseus.core.data.errors import DataError

CHUNK_STEPS = 1024
_COUNTS_STREAM = 0x31C5
_PLACES_STREAM = 0x9A7E


@dataclass(frozen=True)
class Stage:
    """Steps ``[start, end)`` (``end`` None: to the end of training) and the weights."""

    start: int
    end: int | None
    weights: tuple[float, ...]


def stage_ends(
    schedule: Sequence[Any], total_steps: int | None, tokens_per_step: int
) -> list[int | None]:
    """The step at which each stage of ``data.mixture_schedule`` ends (None: the last).

    A stage before the last ends at exactly one of ``until`` (a fraction of training,
    rounded to a step), ``until_step`` or ``until_tokens`` (rounded up to a step)."""
    ends: list[int | None] = []
    previous = 0
    for index, stage in enumerate(schedule):
        key = f"data.mixture_schedule[{index}]"
        given = [
            name for name in ("until", "until_step", "until_tokens") if getattr(stage, name, 0)
        ]
        last = index == len(schedule) - 1
        if last:
            if given:
                raise DataError(
                    f"{key} is the last stage and runs to the end of training: remove its "
                    f"{given[0]}"
                )
            ends.append(None)
            continue
        if len(given) != 1:
            raise DataError(
                f"{key} needs exactly one of until (a fraction of training), until_step or "
                f"until_tokens; it has {given or 'none'}"
            )
        if given[0] == "until":
            if not 0 < stage.until <= 1:
                raise DataError(f"{key}.until is {stage.until}; expected a fraction in (0, 1]")
            if not total_steps:
                raise DataError(
                    f"{key}.until is a fraction of training: the loader needs the number of "
                    "training steps (use until_step or until_tokens here)"
                )
            end = round(stage.until * total_steps)
        elif given[0] == "until_step":
            end = int(stage.until_step)
        else:
            end = math.ceil(int(stage.until_tokens) / tokens_per_step)
        if end <= previous:
            raise DataError(
                f"{key} ends at step {end}, not after the stage before it (step {previous}): "
                "stages must end in increasing order"
            )
        ends.append(end)
        previous = end
    return ends


def normalized(weights: Sequence[float], where: str) -> tuple[float, ...]:
    """Weights summing to 1; negative or all-zero weights are one line naming ``where``."""
    values = [float(w) for w in weights]
    if any(not (w >= 0 and math.isfinite(w)) for w in values):
        raise DataError(f"{where} has weights {values}; weights must be finite and >= 0")
    total = sum(values)
    if total <= 0:
        raise DataError(f"{where} gives every dataset weight 0; at least one must be > 0")
    return tuple(w / total for w in values)


class Mixture:
    """Assigns the items of each global step to (dataset, row of that dataset)."""

    def __init__(self, stages: Sequence[Stage], items_per_step: int, seed: int) -> None:
        if not stages or stages[0].start != 0 or stages[-1].end is not None:
            raise DataError("a mixture needs stages from step 0 to the end of training")
        self.stages = list(stages)
        self.sources = len(stages[0].weights)
        self.items = items_per_step
        self.seed = seed % 2**63
        self._chunk_starts: list[int] = []  # first step of each chunk known so far
        self._chunk_before: list[np.ndarray] = []  # items per dataset before each chunk
        self._chunks: dict[int, np.ndarray] = {}

    @classmethod
    def single(cls, items_per_step: int, seed: int) -> Mixture:
        return cls([Stage(0, None, (1.0,))], items_per_step, seed)

    def stage_at(self, step: int) -> int:
        return next(i for i, s in enumerate(self.stages) if s.end is None or step < s.end)

    def weights_at(self, step: int) -> tuple[float, ...]:
        return self.stages[self.stage_at(step)].weights

    # ------------------------------------------------------------------ counts
    def _chunk_span(self, index: int) -> tuple[int, int, int]:
        """(stage, first step, steps) of chunk ``index`` (chunks never cross a stage)."""
        step = self._chunk_starts[index] if index < len(self._chunk_starts) else None
        if step is None:
            raise IndexError(index)
        stage = self.stage_at(step)
        end = self.stages[stage].end
        steps = CHUNK_STEPS - (step - self.stages[stage].start) % CHUNK_STEPS
        if end is not None:
            steps = min(steps, end - step)
        return stage, step, steps

    def _extend_to(self, step: int) -> None:
        """Know the chunks up to the one holding ``step``."""
        if not self._chunk_starts:
            self._chunk_starts.append(0)
            self._chunk_before.append(np.zeros(self.sources, np.int64))
        while True:
            index = len(self._chunk_starts) - 1
            _, first, steps = self._chunk_span(index)
            if step < first + steps:
                return
            self._chunk_before.append(self._chunk_before[index] + self._chunk(index).sum(axis=0))
            self._chunk_starts.append(first + steps)

    def _chunk(self, index: int) -> np.ndarray:
        """[steps, datasets] items per step of chunk ``index``."""
        counts = self._chunks.get(index)
        if counts is None:
            stage, first, steps = self._chunk_span(index)
            chunk = (first - self.stages[stage].start) // CHUNK_STEPS
            rng = np.random.default_rng([self.seed, _COUNTS_STREAM, stage, chunk])
            weights = np.array(self.stages[stage].weights, np.float64)
            counts = rng.multinomial(self.items, weights, size=steps).astype(np.int64)
            self._chunks = {k: v for k, v in self._chunks.items() if k >= index - 1}
            self._chunks[index] = counts
        return counts

    def counts(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(items of each dataset in steps before ``step``, items of each at ``step``)."""
        if self.sources == 1:
            return np.array([step * self.items]), np.array([self.items])
        self._extend_to(step)
        index = int(np.searchsorted(self._chunk_starts, step, side="right")) - 1
        first = self._chunk_starts[index]
        chunk = self._chunk(index)
        before = self._chunk_before[index] + chunk[: step - first].sum(axis=0)
        return before, chunk[step - first]

    def realized(self, step: int) -> np.ndarray:
        """Each dataset's share of the items of steps ``0..step``."""
        before, now = self.counts(step)
        total = before + now
        return total / max(int(total.sum()), 1)

    # ------------------------------------------------------------------ rows
    def assign(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(dataset, row of that dataset) of each of the step's ``B`` items, in batch order."""
        if self.sources == 1:
            rows = step * self.items + np.arange(self.items, dtype=np.int64)
            return np.zeros(self.items, np.int64), rows
        before, now = self.counts(step)
        sorted_sources = np.repeat(np.arange(self.sources), now)
        firsts = np.cumsum(now) - now
        rank = np.arange(self.items) - np.repeat(firsts, now)
        places = np.random.default_rng([self.seed, _PLACES_STREAM, step]).permutation(self.items)
        source = np.empty(self.items, np.int64)
        row = np.empty(self.items, np.int64)
        source[places] = sorted_sources
        row[places] = before[sorted_sources] + rank
        return source, row
