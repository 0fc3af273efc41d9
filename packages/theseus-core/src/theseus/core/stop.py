"""A stop asked for by a signal (SIGTERM, SIGINT), seen by code that blocks: a reader
waiting for data still being tokenized gives up its wait instead of outliving the grace
period a cluster allows before it kills the job."""

from __future__ import annotations

import threading

requested = threading.Event()  # set by the trainer's signal handler, cleared when it stops


class StopRequested(Exception):
    """A wait ended because a stop was asked for."""


def check(what: str) -> None:
    """Raise :class:`StopRequested` when a stop has been asked for (``what``: the wait)."""
    if requested.is_set():
        raise StopRequested(f"a stop was asked for while {what}")


def caused_by_stop(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised from, a :class:`StopRequested` (a data thread's
    exception may reach the trainer wrapped)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, StopRequested):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
