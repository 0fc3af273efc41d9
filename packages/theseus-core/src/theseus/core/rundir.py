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


def dispatch_origin() -> dict[str, str] | None:
    """Where this process was dispatched from, as the dispatch bootstrap exported it:
    ``{"target": name, "type": backend[, "job_id": scheduler id]}``; None for a local run."""
    target = os.environ.get("THESEUS_DISPATCH_TARGET")
    if not target:
        return None
    origin = {"target": target, "type": os.environ.get("THESEUS_DISPATCH_TYPE", "")}
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id:
        origin["job_id"] = job_id
    return origin


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole or not at all (a crash or a full disk leaves the old file)."""
    # a unique temporary name: several processes of one multi-host run share the folder
    tmp = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_record(record_path: Path) -> dict[str, Any]:
    """A run's ``job.json`` as a dict; ``JobError`` naming the file if it is not one."""
    from theseus.core.regular_files import read_small

    try:
        data = read_small(record_path)  # a FIFO or a huge file is named, never waited on
    except FileNotFoundError as error:
        raise JobError(f"{record_path} is missing") from error
    except OSError as error:
        raise JobError(f"{record_path} cannot be read: {error.strerror or error}") from error
    return parse_record(record_path, data)


def parse_record(record_path: Path, data: bytes) -> dict[str, Any]:
    """The bytes of a run's ``job.json`` as a dict; ``JobError`` naming the file if they are
    not a JSON object."""
    try:
        record = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise JobError(
            f"{record_path} is not UTF-8 text (byte {error.start}: {error.reason})"
        ) from error
    except json.JSONDecodeError as error:
        raise JobError(f"{record_path} is not valid JSON: {error}") from error
    if not isinstance(record, dict):
        raise JobError(f"{record_path} holds a JSON {type(record).__name__}, not an object")
    return record


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
        if not self.record_path.exists():
            raise JobError(f"no run named {self.name!r} under {self.root}")
        return read_record(self.record_path)

    def write_record(self, record: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.record_path, json.dumps(record, indent=2, sort_keys=True) + "\n")

    def update_record(self, **changes: Any) -> dict[str, Any]:
        record = self.read_record() if self.exists() else {}
        record.update(changes)
        self.write_record(record)
        return record

    def create(self, key: str, config_yaml: str, parent: str | None) -> dict[str, Any]:
        (self.path / "logs").mkdir(parents=True, exist_ok=True)
        write_atomic(self.config_path, config_yaml)  # a full disk leaves the old one whole
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
            "dispatched": dispatch_origin(),
            "attempts": previous.get("attempts", 0),
            "history": previous.get("history", []),
            "checkpoint_step": previous.get("checkpoint_step", 0),
        }
        self.write_record(record)
        return record
