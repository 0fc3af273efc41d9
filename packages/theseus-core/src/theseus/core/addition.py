"""The synthetic addition task's one split: which ``a+b`` problems are held out.

The ``addition`` chat set and the ``addition-preference`` pairs (theseus-data) train only on
problems this rule keeps; the ``addition`` evaluation asks only held-out ones, so its exact
match measures addition learned, not answers remembered. The rule is a checksum of the
problem's text (stable across Python versions and processes, unrelated to the answer's
digits): about one problem in ten is held out.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator

HELD_OUT_ONE_IN = 10


def question(a: int, b: int) -> str:
    return f"What is {a}+{b}?"


def held_out(a: int, b: int) -> bool:
    """Whether ``a+b`` belongs to the evaluation side of the split."""
    return zlib.crc32(f"{a}+{b}".encode()) % HELD_OUT_ONE_IN == 0


def problems(
    seed: int | str, max_digits: int, count: int, evaluation: bool
) -> Iterator[tuple[int, int]]:
    """``count`` operand pairs below ``10**max_digits`` drawn from ``seed``, all on one side
    of the split (``evaluation``: the held-out side). Pairs may repeat; with one-digit
    operands there are 100 problems, 10 of them held out."""
    rng = random.Random(seed)
    top = 10**max_digits
    made = 0
    while made < count:
        a, b = rng.randrange(top), rng.randrange(top)
        if held_out(a, b) == evaluation:
            made += 1
            yield a, b
