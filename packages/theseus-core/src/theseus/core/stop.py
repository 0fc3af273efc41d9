"""The one signal rule: SIGTERM and SIGINT (Ctrl-C) stop a job, never kill it mid-write.

A long-running job runs its work inside :func:`graceful`: a signal then only asks for a
stop (:data:`requested`), said once in one line; the job stops at its next safe point (a
training step, a tokenized unit) within its grace period, keeps what it finished (a
checkpoint, the units it published), leaves no process behind, and raises
:class:`~theseus.core.errors.PreemptedError`: one line, exit 3 and status ``preempted``,
and running the same command again resumes it. A second signal stops it at once.

Outside any :func:`graceful` block, the CLI makes SIGTERM interrupt as Ctrl-C does
(:func:`interrupt_on_signals`), so a job without safe points ends the way Ctrl-C ends it:
its cleanup runs and the CLI says so in one line (exit 130, or 143 for SIGTERM).

Code that blocks (a reader waiting for data still being tokenized) calls :func:`check`, so
that the wait gives up instead of outliving the grace period a cluster allows before it
kills the job.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

requested = threading.Event()  # set by a signal inside graceful(), cleared when it ends
received: list[int] = []  # the signals this process was asked to stop by, in order
SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


def signal_name(signum: int) -> str:
    """``SIGTERM``, ``SIGINT``..."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def last_signal() -> str:
    """The name of the signal that asked for the newest stop (``a signal`` if none did)."""
    return signal_name(received[-1]) if received else "a signal"


@contextmanager
def graceful(what: str, on_stop: Callable[[], None] | None = None) -> Iterator[None]:
    """Inside: SIGTERM and SIGINT ask ``what`` to stop (see the module docstring) rather
    than kill it; ``on_stop`` runs when the first one arrives. The main thread only (in
    another thread signals cannot be handled: a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if requested.is_set():  # a second signal: at once
            raise KeyboardInterrupt
        received.append(signum)
        requested.set()
        log.warning(
            "%s: stopping %s at its next safe point (a second signal stops it at once)",
            signal_name(signum),
            what,
        )
        if on_stop is not None:
            on_stop()

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        requested.clear()
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupt_on_signals() -> None:
    """SIGTERM interrupts as SIGINT does (``KeyboardInterrupt``), each recorded in
    :data:`received`: what the CLI sets outside :func:`graceful` blocks."""

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, handler)


def interrupted_exit_code() -> int:
    """The exit code of a command a signal interrupted: 128 + the signal (130: SIGINT)."""
    return 128 + (received[-1] if received else signal.SIGINT)
