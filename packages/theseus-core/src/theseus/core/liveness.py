"""Is a run that says "running" still running? Its lock knows.

A job that dies without a word (SIGKILL, a segfault in a native library, the machine
losing power) cannot write "failed" into its ``job.json``, which then says "running" for
ever. The run's lock (:mod:`theseus.core.locks`) is held by the kernel for exactly as
long as the process lives, so the listing asks the lock, without taking it:

* the holder written beside the lock ran on this host: is that process alive, and did it
  start before it took the lock (a PID reused by a later process is not the holder)?
* the holder ran elsewhere (a shared root): try a *shared*, non-blocking ``flock``; it fails
  while an exclusive lock is held, and succeeds (and is dropped at once) when nobody holds it.

Nothing is written: the record keeps what the run wrote, the listing shows ``died``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from theseus.core.locks import lock_path
from theseus.core.regular_files import read_small

DIED = "died"


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from /proc; None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    boot = _boot_time()
    if boot is None or len(fields) < 20:
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _local_holder_alive(pid: int, since: float) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    started = _started_at(pid)
    return started is None or started <= since + 1.0  # a later process reusing the PID: dead


def _flock_held(path: Path) -> bool | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(descriptor)  # closing drops the shared lock, if it was taken
    return False


def holder_alive(directory: Path) -> bool | None:
    """Whether a live process holds ``directory``'s lock: True, False, or None when it
    cannot be told (no lock file: the run was never locked here)."""
    path = lock_path(Path(directory))
    if not path.exists():
        return None
    try:
        owner = json.loads(read_small(path.with_suffix(".owner"), 64 * 1024))
        pid, host, since = int(owner["pid"]), str(owner["host"]), float(owner["since"])
    except (OSError, ValueError, KeyError, TypeError):
        owner = None
    if owner is not None and host == socket.gethostname():
        return _local_holder_alive(pid, since)
    return _flock_held(path)


def shown_status(directory: Path, status: object) -> object:
    """``status`` as a listing shows it: ``died`` for a "running" run whose lock nobody
    holds; anything else unchanged."""
    if status == "running" and holder_alive(directory) is False:
        return DIED
    return status
