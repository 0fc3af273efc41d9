"""Seconds each test file took, from a run's ``--durations=0`` report, and the order in which
``pytest -n 2 --dist loadfile`` hands files out: the longest first.

xdist gives a worker one file at a time in collection order (pyproject's addopts turn off its
own reordering, which put the files with the most tests first, so the one-test README tour
last). Longest first, the last files handed out are the shortest, and the two workers end
within a few seconds of each other; with only the 30 longest ranked, the rest in collection
order, a 49-second file could come last (stop 53's fresh-clone run: 4,077 worker-seconds in
2,097 s of wall time, 58 s more than half; ranked by this table, the next took 3,642 in 1,860 s).

Regenerate ``durations.json`` from a fresh-clone ``.ci/run`` with
``PYTEST_ADDOPTS=--durations=0``: ``python -m tests.durations ci.log > tests/durations.json``.
A file it does not name (a new one) is ranked as if it took ``UNKNOWN_SECONDS``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("durations.json")
UNKNOWN_SECONDS = 30.0
LINE = re.compile(r"^([\d.]+)s (?:call|setup|teardown) +(tests/[^:]+\.py)::")


def measured() -> dict[str, float]:
    """Test file (relative to the repository) -> seconds, from ``durations.json``."""
    return json.loads(TABLE.read_text())


def rank(path: str, table: dict[str, float]) -> float:
    """The sort key of a file: minus its seconds (longest first)."""
    return -table.get(path, UNKNOWN_SECONDS)


def from_report(text: str, files: list[str]) -> dict[str, float]:
    """Seconds per file summed over its tests' setup, call and teardown lines; ``files``
    the report leaves out (every test under 5 ms) count 0."""
    seconds: dict[str, float] = defaultdict(float, dict.fromkeys(files, 0.0))
    for line in text.splitlines():
        if found := LINE.match(line):
            seconds[found.group(2)] += float(found.group(1))
    return {path: round(total, 1) for path, total in sorted(seconds.items(), key=lambda kv: -kv[1])}


def every_test_file() -> list[str]:
    """Every test file of the suite, relative to the repository."""
    repo = TABLE.parents[1]
    return sorted(p.relative_to(repo).as_posix() for p in TABLE.parent.rglob("test_*.py"))


if __name__ == "__main__":
    print(json.dumps(from_report(Path(sys.argv[1]).read_text(), every_test_file()), indent=1))
