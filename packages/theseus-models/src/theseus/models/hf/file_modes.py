"""Files an export writes get the mode a plain write gives them, whoever wrote them."""

from __future__ import annotations

import os
from pathlib import Path


def umask() -> int:
    """This process's umask (read from /proc where it can be, so no thread sees it change)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def share_as_umask(path: Path) -> None:
    """Give ``path`` (and what a folder holds) the mode a plain ``open`` gives: 0666 (0777
    for folders) less the umask, so 0644 under the usual 022. safetensors writes its files
    0600, which would leave an export unreadable to anyone else (a shared model folder)."""
    mask = umask()
    for entry in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if entry.is_symlink():
            continue
        entry.chmod((0o777 if entry.is_dir() else 0o666) & ~mask)
