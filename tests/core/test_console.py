"""What the console keeps out without -v: environment failures' tracebacks and background
exceptions (the run's log keeps them); everything else is shown as before."""

from __future__ import annotations

import errno
import logging
import sys
import threading

from theseus.core.console import RunLogHandler, background_note, install


def record(name: str, level: int, message: str, error: BaseException | None = None):
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord(name, level, __file__, 1, message, None, exc_info)


def test_the_console_drops_environment_noise_and_keeps_the_rest():
    handler = logging.StreamHandler()
    console, restore = install(handler)
    try:
        full = OSError(errno.ENOSPC, "No space left on device")
        keep = handler.filter(record("theseus.core.train.metrics", logging.INFO, "step=1"))
        assert keep
        assert handler.filter(record("absl", logging.ERROR, "save failed", RuntimeError("x")))
        assert not handler.filter(record("absl", logging.ERROR, "write failed", full))
        assert console.environment_failed
        # after the disk filled, another library's errors are its consequences
        assert not handler.filter(record("absl", logging.ERROR, "Save Finalize failed."))
        assert handler.filter(record("theseus.core.runner", logging.INFO, "resuming"))
        assert sys.excepthook is not sys.__excepthook__
        logging.getLogger("theseus.background").addHandler(handler)
        thread = threading.Thread(target=lambda: 1 / 0, name="worker")
        thread.start()
        thread.join()
        assert console.background == 1
        assert background_note(console) is None  # explained by the full disk
        console.environment_failed = False
        assert background_note(console).startswith("note: 1 uncaught exception in background")
    finally:
        logging.getLogger("theseus.background").removeHandler(handler)
        restore()
    assert sys.excepthook is sys.__excepthook__ and handler.filters == []


def test_the_run_log_drops_a_record_it_cannot_write_on_a_full_disk(tmp_path, capsys):
    handler = RunLogHandler(tmp_path / "run.log")
    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError:
        handler.handleError(record("theseus", logging.INFO, "x"))
    assert capsys.readouterr().err == ""  # logging would print "--- Logging error ---"
    handler.close()
