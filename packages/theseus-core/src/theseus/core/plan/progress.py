"""What a dry run is doing while it works, and how long each part took.

Compiling a real-size step for a TPU or GPU on a CPU machine takes from seconds to minutes.
:class:`Progress` says what runs through the ``theseus.core.plan`` logger (the CLI prints it
on stderr): a line when it starts, one every ``TICK`` seconds from a background timer
thread, and one when it ends. :class:`Clock` adds each part's seconds up, so that the plan
can say where its wall time went (``Clock.fields``): the parts, and what none of them
covered (``other``), summing to the wall time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from types import TracebackType

log = logging.getLogger("theseus.core.plan")
TICK = 10.0  # seconds between two "still working" lines


class Progress:
    """``with Progress("compiling the step for v5e-8"):`` -- a line at the start, one every
    ``tick`` seconds while the block runs, and one at the end with its seconds (and
    ``outcome``, when the block sets it)."""

    def __init__(self, what: str, tick: float = TICK) -> None:
        self.what = what
        self.tick = tick
        self.outcome = ""
        self.seconds = 0.0
        self._started = 0.0
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    def __enter__(self) -> Progress:
        self._started = time.perf_counter()
        log.info("dry run: %s ...", self.what)
        self._timer = threading.Thread(target=self._ticks, name="dry-run-progress", daemon=True)
        self._timer.start()
        return self

    def _ticks(self) -> None:
        while not self._stop.wait(self.tick):
            log.info("dry run: %s, %.0f s so far", self.what, self.elapsed())

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        self.seconds = self.elapsed()
        if error is not None:
            log.info("dry run: %s: stopped after %.1f s", self.what, self.seconds)
            return
        outcome = f" ({self.outcome})" if self.outcome else ""
        log.info("dry run: %s: done in %.1f s%s", self.what, self.seconds, outcome)


class Clock:
    """The plan's wall time since it was made, and the seconds of each named part."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.parts: dict[str, float] = {}

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds

    @contextlib.contextmanager
    def part(self, name: str, what: str = "") -> Iterator[None]:
        """Time the block as ``name``; with ``what``, say so while it runs (``Progress``)."""
        started = time.perf_counter()
        try:
            if what:
                with Progress(what):
                    yield
            else:
                yield
        finally:
            self.add(name, time.perf_counter() - started)

    def fields(self) -> dict[str, object]:
        """``wall_seconds`` and ``seconds`` (each part, then ``other``: the rest of the wall
        time), for the plan's dict."""
        wall = time.perf_counter() - self.started
        parts = dict(self.parts)
        parts["other"] = max(0.0, wall - sum(parts.values()))
        return {"wall_seconds": wall, "seconds": parts}
