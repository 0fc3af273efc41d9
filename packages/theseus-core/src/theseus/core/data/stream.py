"""One split of one dataset as the loader reads it, growing while it is tokenized.

A :class:`Stream` holds the split's rows source (packed windows, padded documents or
pairs) over the shards published so far. ``ensure(count)`` returns once ``count`` items
exist or the dataset is complete; until then it waits, re-reading what the tokenize job
published, says once in the log (and in :class:`Waits`, which the progress bar shows)
which unit the tokenization is at, and stops with one line when no process is writing
the data any more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from theseus.core import stop
from theseus.core.data.reader import POLL_SECONDS, TokenizedDataset

log = logging.getLogger(__name__)
WRITER_CHECK_SECONDS = 2.0  # how often a waiting reader checks the tokenize job lives
LOOK_SECONDS = 1.0  # how often a reader that need not wait looks for newly published data


class Waits:
    """What the loader waited for: total seconds, and what it waits for now (or None)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.status: str | None = None
        self.episodes = 0


class Stream:
    """The rows source of ``split`` of ``dataset``, rebuilt as units are published."""

    def __init__(
        self,
        dataset: TokenizedDataset,
        split: str,
        make_source: Callable[[list], Any],
        waits: Waits,
    ) -> None:
        self.dataset = dataset
        self.split = split
        self.make_source = make_source
        self.waits = waits
        self._lock = threading.Lock()
        self._version = -1
        self._looked = time.perf_counter()
        self.source: Any = None
        self._rebuild()

    def _rebuild(self) -> None:
        version = getattr(self.dataset, "version", 0)
        if version != self._version:
            self.source = self.make_source(self.dataset.splits[self.split])
            self._version = version

    @property
    def complete(self) -> bool:
        return self.dataset.complete

    def known(self) -> int:
        """Items published so far (all of them once complete)."""
        return len(self.source)

    def describe(self) -> str:
        return f"the {self.split} split of {self.dataset.path}"

    def ensure(self, count: int) -> None:
        """Block until ``count`` items exist or the dataset is complete."""
        with self._lock:
            now = time.perf_counter()
            if not self.complete and now - self._looked >= LOOK_SECONDS:
                self._looked = now  # see the data complete soon after it is
                self.dataset.refresh()
            self._rebuild()
            if self.known() >= count or self.complete:
                return
            started = time.perf_counter()
            last_check = started
            self.waits.episodes += 1
            self.waits.status = f"waiting for {self.dataset.path.name}: {self.dataset.units_line()}"
            first = self.waits.episodes == 1
            log.log(
                logging.INFO if first else logging.DEBUG,
                "%s: %d rows published, %d needed; waiting for the tokenization (%s)%s",
                self.describe(),
                self.known(),
                count,
                self.dataset.units_line(),
                " (said once; the progress bar shows each wait)" if first else "",
            )
            try:
                while True:
                    stop.check(f"waiting for {self.describe()}")
                    if self.dataset.refresh():
                        self._rebuild()
                        self.waits.status = (
                            f"waiting for {self.dataset.path.name}: {self.dataset.units_line()}"
                        )
                    if self.known() >= count or self.complete:
                        break
                    now = time.perf_counter()
                    if now - last_check >= WRITER_CHECK_SECONDS:
                        last_check = now
                        self.dataset.check_writer()
                    time.sleep(POLL_SECONDS)
            finally:
                self.waits.seconds += time.perf_counter() - started
                self.waits.status = None
            if self.complete:
                log.info(
                    "%s is complete: %.1f s spent waiting for its tokenization in %d waits",
                    self.dataset.path,
                    self.waits.seconds,
                    self.waits.episodes,
                )
