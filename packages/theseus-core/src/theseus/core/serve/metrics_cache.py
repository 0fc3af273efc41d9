"""``metrics.jsonl`` files read once and then only as they grow.

A page polls a live run every couple of seconds; re-reading a long run's whole metrics log
each time would cost the server O(file) per poll. Each file is remembered with its inode,
size and the offset of its last complete line: a file that only grew is read from that
offset; a file that was replaced (a resume moves superseded rows out and rewrites it) or
shrank is read whole again and gets a new ``version``, so a client knows to start over.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theseus.core.inspect.runs import parse_metric_lines


@dataclass
class MetricsFile:
    """What one file held when last read."""

    inode: int = -1
    size: int = -1
    complete: int = 0  # bytes up to the end of the last complete line
    generation: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)
    lines: int = 0  # complete lines read so far (for numbering bad ones)

    @property
    def version(self) -> str:
        return f"{self.inode}.{self.generation}"


class MetricsCache:
    """Thread-safe cache of parsed metric files, keyed by path."""

    def __init__(self) -> None:
        self._files: dict[Path, MetricsFile] = {}
        self._lock = threading.Lock()
        self._generations = 0

    def read(self, path: Path) -> MetricsFile:
        """The rows of ``path`` as it is now (an empty file when it does not exist)."""
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return MetricsFile()
        with self._lock:
            cached = self._files.get(path)
            if cached is None or cached.inode != stat.st_ino or stat.st_size < cached.complete:
                self._generations += 1
                cached = MetricsFile(inode=stat.st_ino, generation=self._generations)
                self._files[path] = cached
            if stat.st_size != cached.size:
                self._extend(path, cached)
            return cached

    def rows(self, run_path: Path) -> list[dict[str, Any]]:
        """A run folder's rows (the shape ``run_summaries`` takes)."""
        return self.read(run_path / "metrics.jsonl").rows

    @staticmethod
    def _extend(path: Path, cached: MetricsFile) -> None:
        with path.open("rb") as handle:
            handle.seek(cached.complete)
            data = handle.read()
        cached.size = cached.complete + len(data)
        end = data.rfind(b"\n") + 1  # an unfinished last line is read when it is finished
        rows, bad = parse_metric_lines(data[:end])
        for entry in bad:  # "N (problem)", N counted within this chunk
            number, _, problem = entry.partition(" ")
            cached.bad_lines.append(f"{int(number) + cached.lines} {problem}")
        cached.rows = cached.rows + rows  # a new list: readers may hold the old one
        cached.lines += data[:end].count(b"\n")
        cached.complete += end
