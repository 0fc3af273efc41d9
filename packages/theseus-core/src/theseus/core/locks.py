"""Exclusive locks on run and dataset directories, held for a whole job.

The lock is an OS file lock (``filelock``: ``flock`` on POSIX) on ``<root>/<kind>/.locks/
<name>.lock``, beside the directory it guards, so ``--fresh`` can delete the directory while
the lock is held. The kernel releases it when the holder exits, however it exits (SIGKILL
included), so a lock left by a dead process is taken over by the next job without any
staleness guess. Who holds it is written next to it for the one-line refusal.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout
from theseus.core.errors import TheseusError
from theseus.core.folders import make_folder


class LockedError(TheseusError):
    """Another process is using the run or dataset directory."""


def lock_path(directory: Path) -> Path:
    """``<parent>/.locks/<name>.lock`` for ``<parent>/<name>``."""
    return directory.parent / ".locks" / f"{directory.name}.lock"


@contextmanager
def exclusive(directory: Path, what: str, hint: str) -> Iterator[None]:
    """Hold ``directory``'s lock for the block; if another process holds it, one line
    naming ``what``, the holder's PID and host, and ``hint``."""
    path = lock_path(Path(directory))
    make_folder(path.parent, f"the lock of {what} (check the root)")
    lock = FileLock(str(path), timeout=0, thread_local=False)
    owner = path.with_suffix(".owner")
    try:
        lock.acquire()
    except Timeout:
        raise LockedError(f"{what} is in use by {_holder(owner)}; {hint}") from None
    try:
        owner.write_text(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        )
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def holder(directory: Path) -> str | None:
    """Who holds ``directory``'s lock now (``pid N on host H since ...``), or None.

    Readers never take the lock: on the holder's host the PID in the owner file tells
    whether it lives (a SIGKILLed holder leaves its owner file behind); elsewhere, or
    without an owner file, a shared probe of the lock tells (released at once).
    """
    path = lock_path(Path(directory))
    owner = path.with_suffix(".owner")
    try:
        data = json.loads(owner.read_text())
        pid, host = int(data["pid"]), str(data["host"])
    except (OSError, ValueError, KeyError, TypeError):
        pid, host = None, None
    if pid is not None and host == socket.gethostname():
        return _holder(owner) if _alive(pid) else None
    if not path.exists():
        return None
    import fcntl

    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(owner)
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    try:  # a killed process its parent has not reaped yet is a zombie: gone
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _holder(owner: Path) -> str:
    try:
        data = json.loads(owner.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["since"]))
        return f"pid {data['pid']} on host {data['host']} since {since}"
    except (OSError, ValueError, KeyError):
        return "another process (its owner file is missing)"
