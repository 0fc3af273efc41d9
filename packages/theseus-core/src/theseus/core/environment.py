"""Failures of the machine, not of the user's input: a full disk, a root that cannot be
written. Each becomes one line that says what happened, where, and what to do.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from theseus.core.errors import TheseusError


class EnvironmentProblem(TheseusError):
    """The disk, the file system or the network is in the way; the user can fix it."""


_ADVICE = {
    errno.ENOSPC: "free some space (or use another --root), then rerun the same command to resume",
    errno.EDQUOT: "free some space under your quota, then rerun the same command to resume",
    errno.EROFS: "the file system is read-only: use a writable --root",
    errno.EACCES: "you may not write there: use a writable --root or fix its permissions",
    errno.EPERM: "you may not write there: use a writable --root or fix its permissions",
}
_TEXT = {  # libraries that wrap an OSError in their own exception keep only its text
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
}


def explain(error: BaseException) -> str | None:
    """One line for an environment failure anywhere in ``error``'s chain, else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _ADVICE:
            where = f" ({current.filename})" if current.filename else ""
            return f"{os.strerror(current.errno).lower()}{where}: {_ADVICE[current.errno]}"
        for text, code in _TEXT.items():
            if text in str(current):
                return f"{text.lower()}: {_ADVICE[code]}"
        current = current.__cause__ or current.__context__
    return None


def check_root(root: str | os.PathLike) -> Path:
    """The root exists (created if missing) as a writable directory, or one clear line."""
    path = Path(root)
    if path.exists() and not path.is_dir():
        raise EnvironmentProblem(f"root {path} is a file, not a directory: choose another --root")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".theseus-probe-"):
            pass
    except OSError as error:
        reason = os.strerror(error.errno).lower() if error.errno else str(error)
        advice = _ADVICE.get(error.errno or 0, "choose a root you can write to with --root")
        raise EnvironmentProblem(f"cannot write to root {path} ({reason}): {advice}") from error
    return path
