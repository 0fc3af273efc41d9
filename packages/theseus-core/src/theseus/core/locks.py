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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TheseusError(
            f"cannot create {path.parent} ({error.strerror}): check the root"
        ) from error
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


def _holder(owner: Path) -> str:
    try:
        data = json.loads(owner.read_text())
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["since"]))
        return f"pid {data['pid']} on host {data['host']} since {since}"
    except (OSError, ValueError, KeyError):
        return "another process (its owner file is missing)"
