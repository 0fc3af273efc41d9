"""Where dispatch keeps a user's files: an environment variable's path, else the XDG base
folder (its variable, else its default under ``~``) with ``theseus/<name>`` below it."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(env: str, xdg_variable: str, xdg_default: str, name: str) -> Path:
    """``$env`` if set, else ``${xdg_variable:-xdg_default}/theseus/name``."""
    chosen = os.environ.get(env)
    if chosen:
        return Path(chosen)
    base = os.environ.get(xdg_variable) or os.path.expanduser(xdg_default)
    return Path(base) / "theseus" / name
