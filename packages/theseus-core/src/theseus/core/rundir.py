"""The run directory: one folder per run under ``<root>/runs/``, readable with ``ls``.

<root>/runs/<name>/config.yaml     the resolved config
<root>/runs/<name>/job.json        job key, status, package versions, revision, parent
<root>/runs/<name>/logs/run.log    the job's log
<root>/runs/<name>/metrics.jsonl   metrics, one JSON object per line
<root>/runs/<name>/checkpoints/    Orbax checkpoints
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

from theseus.core.errors import JobError


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    import importlib.metadata as metadata

    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith("theseus") or name in ("jax", "jaxlib", "flax", "optax"):
            versions[name] = dist.version
    return dict(sorted(versions.items()))


def source_revision() -> str | None:
    """The git revision of the working directory, with '+dirty' when it has changes."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("+dirty" if dirty else "")


class RunDir:
    """One run's folder and its ``job.json`` record."""

    def __init__(self, root: str | os.PathLike, name: str) -> None:
        self.root = Path(root)
        self.name = name
        self.path = self.root / "runs" / name

    # paths
    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def record_path(self) -> Path:
        return self.path / "job.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def log_path(self) -> Path:
        return self.path / "logs" / "run.log"

    def exists(self) -> bool:
        return self.record_path.exists()

    # the record
    def read_record(self) -> dict[str, Any]:
        try:
            return json.loads(self.record_path.read_text())
        except FileNotFoundError as error:
            raise JobError(f"no run named {self.name!r} under {self.root}") from error
        except json.JSONDecodeError as error:
            raise JobError(f"{self.record_path} is not valid JSON: {error}") from error

    def write_record(self, record: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        # a unique temporary name: several processes of one multi-host run share the folder
        tmp = self.path / f"job.json.{socket.gethostname()}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.record_path)

    def update_record(self, **changes: Any) -> dict[str, Any]:
        record = self.read_record() if self.exists() else {}
        record.update(changes)
        self.write_record(record)
        return record

    def create(self, key: str, config_yaml: str, parent: str | None) -> dict[str, Any]:
        (self.path / "logs").mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config_yaml)
        previous = self.read_record() if self.exists() else {}
        record = {
            "key": key,
            "name": self.name,
            "status": "created",
            "created": previous.get("created", now()),
            "parent": parent if parent is not None else previous.get("parent"),
            "versions": package_versions(),
            "source_revision": source_revision(),
            "host": socket.gethostname(),
            "attempts": previous.get("attempts", 0),
        }
        self.write_record(record)
        return record
