"""What the terminal shows when the machine fails under a run: one line, not hundreds.

A full disk during an asynchronous checkpoint makes Orbax's threads log each failed write
with its traceback, TensorStore's callbacks print "Event loop is closed" tracebacks as the
save is torn down, and the runner logged the job's traceback too: 845 lines for a failure
that :func:`theseus.core.environment.explain` says in one. Without ``-v`` the console now
keeps those out:

* a log record whose exception is an environment failure (``explain`` names it: no space,
  quota, read-only) is not shown, nor any record of another library after one was;
* exceptions raised where nobody catches them, in threads and in callbacks from native
  code (``threading.excepthook``, ``sys.excepthook`` while a command runs,
  ``sys.unraisablehook``), go to the ``theseus.background`` logger: into the run's log
  file with their tracebacks, never to the console; :func:`background_note` says how many
  there were when the command did not end on an environment failure.

The run's log file (``<run>/logs/run.log``) keeps everything; ``-v`` shows everything.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from theseus.core.environment import explain

BACKGROUND = "theseus.background"
log = logging.getLogger(BACKGROUND)


class ConsoleFilter(logging.Filter):
    """Drops, from one handler (the console), what the module docstring lists."""

    def __init__(self) -> None:
        super().__init__()
        self.environment_failed = False
        self.background = 0  # exceptions from threads and callbacks kept off the console

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == BACKGROUND:
            self.background += 1
            return False
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and explain(error) is not None:
            self.environment_failed = True
            return False
        if not record.name.startswith("theseus") and record.levelno >= logging.WARNING:
            try:
                message = record.getMessage()
            except Exception:  # a record whose arguments do not fit: shown as logging shows it
                return True
            if explain(RuntimeError(message)) is not None:
                self.environment_failed = True
            return not self.environment_failed
        return True


def _to_log(kind: str, error: BaseException | None, exc_info: Any) -> None:
    name = type(error).__name__ if error is not None else "error"
    log.error("uncaught %s in %s", name, kind, exc_info=exc_info)


def install(handler: logging.Handler) -> tuple[ConsoleFilter, Callable[[], None]]:
    """Filter ``handler`` (the console) and route uncaught exceptions to the log; returns
    the filter and a function that puts the hooks back (before an uncaught error of the
    command itself is printed as Python prints it)."""
    console = ConsoleFilter()
    handler.addFilter(console)
    saved = (sys.excepthook, threading.excepthook, sys.unraisablehook)

    def excepthook(kind: type, error: BaseException, tb: Any) -> None:
        _to_log("a callback", error, (kind, error, tb))

    def thread_hook(args: Any) -> None:
        if args.exc_type is SystemExit:
            return
        where = f"thread {args.thread.name}" if args.thread is not None else "a thread"
        _to_log(where, args.exc_value, (args.exc_type, args.exc_value, args.exc_traceback))

    def unraisable_hook(args: Any) -> None:
        error = args.exc_value
        exc_info = (args.exc_type, error, args.exc_traceback) if error is not None else None
        _to_log(f"{args.err_msg or 'a finalizer'}", error, exc_info)

    sys.excepthook, threading.excepthook, sys.unraisablehook = (
        excepthook,
        thread_hook,
        unraisable_hook,
    )

    def restore() -> None:
        handler.removeFilter(console)
        sys.excepthook, threading.excepthook, sys.unraisablehook = saved

    return console, restore


def background_note(console: ConsoleFilter) -> str | None:
    """One line when uncaught background exceptions were kept off the console (and the
    command did not end on an environment failure, which explains them)."""
    if not console.background or console.environment_failed:
        return None
    count = console.background
    return (
        f"note: {count} uncaught exception{'s' if count > 1 else ''} in background threads "
        "went to the run's log (logs/run.log); -v shows them here"
    )


class RunLogHandler(logging.FileHandler):
    """A run's log file. A record that cannot be written because the disk is full (or the
    file system read-only) is dropped without a word: the job fails on that same problem and
    says it in one line, where logging would print a traceback per record."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        if error is not None and explain(error) is not None:
            return
        super().handleError(record)


def progress_console() -> Any:
    """The rich console progress bars and spinners draw on: stderr, beside the log, so that
    stdout holds only a command's result (``theseus run ... > out`` gets no spinner)."""
    from rich.console import Console

    return Console(stderr=True)
