"""Creating a folder that theseus writes into, with a one-line error where the OS refuses."""

from __future__ import annotations

from pathlib import Path

from theseus.core.errors import TheseusError


def make_folder(folder: Path, purpose: str) -> Path:
    """``folder``, created with its parents; where that fails, one line naming the folder,
    ``purpose`` (what it is for) and the reason."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TheseusError(
            f"cannot create the folder {folder} for {purpose}: {error.strerror or error}"
        ) from error
    return folder
