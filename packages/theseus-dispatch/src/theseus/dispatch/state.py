"""Local records of submitted runs: ``$THESEUS_DISPATCH_STATE`` or
``~/.local/state/theseus/dispatch/<run>.json`` (mode 0600, no secrets in them).

A record is written only after the target accepted the run, so no record ever claims a
launch that did not happen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from theseus.core.errors import TheseusError
from theseus.core.jobs import check_run_name
from theseus.dispatch.user_paths import user_path

STATE_ENV = "THESEUS_DISPATCH_STATE"


def state_dir() -> Path:
    return user_path(STATE_ENV, "XDG_STATE_HOME", "~/.local/state", "dispatch")


def path_of(name: str) -> Path:
    return state_dir() / f"{check_run_name(name)}.json"


def save(record: dict[str, Any]) -> Path:
    path = path_of(record["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def load(name: str) -> dict[str, Any]:
    path = path_of(name)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as error:
        known = ", ".join(names()) or "none"
        raise TheseusError(f"no submitted run named {name!r} (known: {known})") from error


def exists(name: str) -> bool:
    return path_of(name).exists()


def names() -> list[str]:
    directory = state_dir()
    if not directory.exists():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))
