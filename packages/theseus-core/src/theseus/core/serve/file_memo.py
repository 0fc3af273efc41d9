"""Values computed from files, recomputed only when one of the files changed.

A page refreshes every few seconds and a root may hold hundreds of runs: reading every
``job.json`` and the end of every metrics log on each refresh would cost the server far more
than a ``stat`` of each. A file's stamp is its inode, modification time and size (an append
changes the size, a rewrite the inode or the time); a missing file's stamp is ``None``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any


def stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


class FileMemo:
    """``get(key, paths, compute)``: ``compute()`` once per change of any of ``paths``."""

    def __init__(self) -> None:
        self._values: dict[Hashable, tuple[tuple, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, paths: Sequence[Path], compute: Callable[[], Any]) -> Any:
        stamps = tuple(stamp(path) for path in paths)
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and hit[0] == stamps:
            return hit[1]
        value = compute()
        with self._lock:
            self._values[key] = (stamps, value)
        return value
