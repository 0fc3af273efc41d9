"""Reading files that anyone could have put under a root: regular files only, bounded.

Anything can sit in a run folder under a name theseus reads: a FIFO (opening it waits for
a writer that never comes), a device, a file of many gigabytes. Every read here opens
without blocking (``O_NONBLOCK``), checks on the open descriptor that it is a regular file
and how large it is, and reads at most a bound; anything else is a :class:`NotServed`
(an ``OSError``, so callers that handle unreadable files handle it) naming what it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MIB = 1024 * 1024
MAX_SMALL_FILE = 8 * MIB  # job.json, config.yaml, summary.json, evaluation results


class NotServed(OSError):
    """A file that is not read (not a regular file, or too large), and why."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not read"


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def open_regular(path: Path) -> tuple[int, int]:
    """(descriptor, size) of ``path`` opened for reading if it is a regular file; the
    caller closes the descriptor. FileNotFoundError when it does not exist."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise NotServed(f"{path.name} is {kind}, not a regular file; it is not read")
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, info.st_size


def _read(descriptor: int, count: int) -> bytes:
    chunks, left = [], count
    while left > 0:
        chunk = os.read(descriptor, min(left, 8 * MIB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def too_large(path: Path, size: int, limit: int) -> NotServed:
    return NotServed(
        f"{path.name} is {size / MIB:.0f} MiB, more than the {limit // MIB} MiB the view reads"
    )


def read_small(path: Path, limit: int = MAX_SMALL_FILE) -> bytes:
    """The whole of a small regular file (at most ``limit`` bytes, else NotServed)."""
    descriptor, size = open_regular(path)
    try:
        if size > limit:
            raise too_large(path, size, limit)
        data = _read(descriptor, limit + 1)
        if len(data) > limit:  # it grew since fstat
            raise too_large(path, len(data), limit)
        return data
    finally:
        os.close(descriptor)


def read_range(path: Path, start: int, limit: int) -> tuple[bytes, int]:
    """(at most ``limit`` bytes from ``start``, the file's size) of a regular file."""
    descriptor, size = open_regular(path)
    try:
        os.lseek(descriptor, start, os.SEEK_SET)
        return _read(descriptor, max(0, min(limit, size - start))), size
    finally:
        os.close(descriptor)


def read_all(path: Path) -> bytes:
    """The whole of a regular file, however large (what a command the user ran asks for);
    NotServed for a FIFO, a device or a folder."""
    descriptor, size = open_regular(path)
    try:
        return _read(descriptor, size) + _read(descriptor, 1 << 62)  # and what it grew by
    finally:
        os.close(descriptor)
