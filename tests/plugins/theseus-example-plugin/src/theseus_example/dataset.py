"""The example dataset: counting rhymes generated from a seed (a third-party text dataset)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from theseus.data.datasets.base import Dataset

ANIMALS = ["cat", "dog", "owl", "fox", "bee", "eel", "yak", "ant"]
PLACES = ["on the mat", "in the fog", "by the tree", "under a log", "near the sea"]


class CountingRhymes(Dataset):
    kind = "text"

    def records(self) -> Iterator[str]:
        rng = random.Random(self.config.seed)

        def rhymes() -> Iterator[str]:
            for _ in range(self.config.documents):
                animal, place = rng.choice(ANIMALS), rng.choice(PLACES)
                count = rng.randint(1, 9)
                lines = [f"{n} little {animal}s {place}." for n in range(count, 0, -1)]
                yield "\n".join(lines) + f"\nno more {animal}s {place}.\n"

        return self.limit(rhymes())
