"""``metrics.jsonl`` files read once and then only as they grow, held in columns.

A page polls a live run every couple of seconds; re-reading a long run's whole metrics log
each time would cost O(file) per poll. Each file is remembered with its inode, size and
the offset of its last complete line: a file that only grew is read from that offset; a file
that was replaced (a resume moves superseded rows out and rewrites it) or shrank is read
whole again and gets a new ``version``, so a client knows to start over.

Rows are kept as columns (a step per row; per metric, row numbers and float64 values), about
a tenth of the memory of dicts, and at most :data:`MAX_FILES` files are kept (least recently
used first out), so a server left running on a root of long runs stays small.

Only a regular file is read, at most :data:`~theseus.core.serve.files.METRICS_CHUNK` per
request (a long file is caught up over several polls), and each file has its own lock: a
slow read of one run's metrics never holds up a request for another's.
"""

from __future__ import annotations

import os
import stat as stat_module
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.inspect.runs import is_number, parse_metric_lines
from theseus.core.serve.files import (
    MAX_METRICS_FILE,
    METRICS_CHUNK,
    open_regular,
    read_range,
    too_large,
)

MAX_FILES = 64
NO_STEP = -(2**62)


@dataclass
class MetricsFile:
    """What one file held when last read."""

    inode: int = -1
    size: int = -1
    complete: int = 0  # bytes up to the end of the last complete line
    generation: int = 0
    lines: int = 0  # complete lines read so far (for numbering bad ones)
    bad_lines: list[str] = field(default_factory=list)
    steps: array = field(default_factory=lambda: array("q"))
    columns: dict[str, tuple[array, array]] = field(default_factory=dict)
    extras: dict[int, dict[str, Any]] = field(default_factory=dict)  # non-numeric values

    @property
    def version(self) -> str:
        return f"{self.inode}.{self.generation}"

    @property
    def row_count(self) -> int:
        return len(self.steps)

    def add(self, rows: list[dict[str, Any]]) -> None:
        """Append rows (gathered per column first, then added to the arrays at once)."""
        base = len(self.steps)
        steps: list[int] = []
        columns: dict[str, tuple[list[int], list[float]]] = {}
        for offset, row in enumerate(rows):
            index = base + offset
            raw_step = row.get("step")
            step = (
                raw_step if isinstance(raw_step, int) and not isinstance(raw_step, bool) else None
            )
            has_step = step is not None
            steps.append(NO_STEP if step is None else step)
            for key, value in row.items():
                if key == "step" and (has_step or value is None):
                    continue
                if key != "step" and is_number(value):
                    column = columns.get(key)
                    if column is None:
                        column = columns[key] = ([], [])
                    column[0].append(index)
                    column[1].append(value)
                else:
                    self.extras.setdefault(index, {})[key] = value
        self.steps.extend(steps)
        for key, (indices, values) in columns.items():
            held = self.columns.setdefault(key, (array("q"), array("d")))
            held[0].extend(indices)
            held[1].extend(float(v) for v in values)

    def rows(self, start: int = 0) -> list[dict[str, Any]]:
        """Rows ``start``.. as dicts (numbers as floats)."""
        count = self.row_count
        start = min(max(start, 0), count)
        out: list[dict[str, Any]] = [{} for _ in range(count - start)]
        for offset, step in enumerate(self.steps[start:]):
            if step != NO_STEP:
                out[offset]["step"] = step
        for key, (rows, values) in self.columns.items():
            first = int(np.searchsorted(np.frombuffer(rows, dtype=np.int64), start))
            for index, value in zip(rows[first:], values[first:], strict=True):
                out[index - start][key] = value
        for index, extra in self.extras.items():
            if index >= start:
                out[index - start].update(extra)
        return out

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one metric, rows without a step left out."""
        if metric not in self.columns:
            return np.zeros(0, np.int64), np.zeros(0)
        rows, values = self.columns[metric]
        steps = np.frombuffer(self.steps, dtype=np.int64)[np.frombuffer(rows, dtype=np.int64)]
        y = np.frombuffer(values, dtype=np.float64)
        has_step = steps != NO_STEP
        return steps[has_step], y[has_step]


@dataclass
class _Slot:
    """One path's file as last read, and the lock its reads and uses hold."""

    file: MetricsFile
    lock: threading.Lock = field(default_factory=threading.Lock)


class MetricsCache:
    """Thread-safe, size-bounded cache of parsed metric files, keyed by path."""

    def __init__(self, max_files: int = MAX_FILES) -> None:
        self._slots: OrderedDict[Path, _Slot] = OrderedDict()
        self._lock = threading.Lock()  # the table of slots only, never held while reading
        self._generations = 0
        self.max_files = max_files

    def read(self, path: Path, use) -> Any:
        """``use(file)`` on ``path``'s rows as they are now, under that file's lock (an empty
        file when it does not exist); NotServed for what is not a regular file or too big."""
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return use(MetricsFile())
        if not stat_module.S_ISREG(stat.st_mode):
            os.close(open_regular(path)[0])  # raises NotServed, naming what it is
        if stat.st_size > MAX_METRICS_FILE:
            raise too_large(path, stat.st_size, MAX_METRICS_FILE)
        with self._lock:
            slot = self._slots.get(path)
            if slot is None:
                slot = self._slots[path] = _Slot(MetricsFile())
            self._slots.move_to_end(path)
            while len(self._slots) > self.max_files:
                self._slots.popitem(last=False)
        with slot.lock:
            cached = slot.file
            if cached.inode != stat.st_ino or stat.st_size < cached.complete:
                with self._lock:
                    self._generations += 1
                    generation = self._generations
                cached = slot.file = MetricsFile(inode=stat.st_ino, generation=generation)
            if stat.st_size != cached.size:
                self._extend(path, cached)
            return use(cached)

    @staticmethod
    def _extend(path: Path, cached: MetricsFile) -> None:
        data, _ = read_range(path, cached.complete, METRICS_CHUNK)
        cached.size = cached.complete + len(data)
        end = data.rfind(b"\n") + 1  # an unfinished last line is read when it is finished
        if end == 0 and len(data) == METRICS_CHUNK:  # one line longer than a whole chunk
            cached.bad_lines.append(f"{cached.lines + 1} (longer than {METRICS_CHUNK} bytes)")
            cached.complete += len(data)
            return
        rows, bad = parse_metric_lines(data[:end])
        for entry in bad:  # "N (problem)", N counted within this chunk
            number, _, problem = entry.partition(" ")
            cached.bad_lines.append(f"{int(number) + cached.lines} {problem}")
        cached.add(rows)
        cached.lines += data[:end].count(b"\n")
        cached.complete += end


def decimate(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` points that keep the curve's envelope: in each of
    ``max_points // 2`` buckets of consecutive points, the lowest and the highest (a loss
    spike survives); a bucket holding a NaN or an infinity keeps its first one (a gap). The
    first and the last point are always kept."""
    n = len(x)
    if n <= max_points:
        return x, y
    edges = np.linspace(0, n, max(max_points // 2, 1) + 1).astype(np.int64)
    keep: list[int] = []
    finite = np.isfinite(y)
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        if a == b:
            continue
        segment_ok = finite[a:b]
        picks = set()
        if not segment_ok.all():
            picks.add(a + int(np.argmin(segment_ok)))
        if segment_ok.any():
            values = np.where(segment_ok, y[a:b], np.nan)
            picks.add(a + int(np.nanargmin(values)))
            picks.add(a + int(np.nanargmax(values)))
        keep.extend(sorted(picks))
    index = np.unique(np.asarray([0, *keep, n - 1], dtype=np.int64))
    return x[index], y[index]
