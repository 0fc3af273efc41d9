"""Reads that may be slow run beside the request, which waits for them only so long.

A page lists every run: if reading one run's files is slow (a file system that hangs, a
huge file on a cold disk), the whole table must not wait for it. Each run's part of an
answer is computed on a small pool; the request waits until a shared deadline, and what is
not ready by then is answered as "still being read" while the read goes on, so the next
poll (every few seconds) gets it. A read already under way is never started twice, so a
hung run holds at most one worker, whatever the number of polls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

WORKERS = 8
WAIT_SECONDS = 2.0


class Background:
    """``start(key, compute)`` once per key at a time; ``wait(futures, deadline)``."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="theseus-serve-read")
        self._running: dict[Hashable, Future] = {}
        self._lock = threading.RLock()  # a future done already calls back at once

    def start(self, key: Hashable, compute: Callable[[], Any]) -> Future:
        with self._lock:
            future = self._running.get(key)
            if future is None:
                future = self._pool.submit(compute)
                self._running[key] = future
                future.add_done_callback(partial(self._forget, key))
            return future

    def _forget(self, key: Hashable, done: Future) -> None:
        with self._lock:
            if self._running.get(key) is done:
                del self._running[key]

    @staticmethod
    def deadline(seconds: float = WAIT_SECONDS) -> float:
        return time.monotonic() + seconds

    @staticmethod
    def wait(future: Future, deadline: float) -> tuple[bool, Any]:
        """(True, value) when ``future`` is done by ``deadline``; (False, None) otherwise.
        An exception of the computation is raised here."""
        try:
            return True, future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return False, None
