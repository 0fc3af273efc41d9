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

from theseus.core import safe_json, safe_yaml
from theseus.core.errors import JobError
from theseus.core.regular_files import read_small


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


def committed_steps(checkpoint_dir: Path) -> list[int]:
    """Steps whose checkpoint is complete in ``checkpoint_dir``: a save is written under a
    temporary name and renamed to its step number when it is done, so a folder named by
    digits alone is a finished checkpoint."""
    if not checkpoint_dir.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoint_dir.iterdir() if p.name.isdigit())


def checkpoint_step(
    run: RunDir, at: int | None, prefix: str = "", error: type[Exception] = JobError
) -> int:
    """Step ``at`` of ``run`` (which must be checkpointed), or its newest checkpoint when
    ``at`` is None; ``error`` naming the nearest checkpointed steps when there is none."""
    steps = run.checkpointed_steps()
    if at is not None and at in steps:
        return at
    if at is None and steps:
        return steps[-1]
    if at is None:
        raise error(f"{prefix}run {run.name!r} has no checkpoints in {run.checkpoint_dir}")
    nearest = sorted(steps, key=lambda s: (abs(s - at), s))[:2]
    listing = ", ".join(str(s) for s in sorted(nearest)) or "none"
    where = "" if steps else f" (nothing in {run.checkpoint_dir})"
    raise error(
        f"{prefix}run {run.name!r} has no checkpoint at step {at}; nearest checkpointed "
        f"steps: {listing}{where}"
    )


def read_record(record_path: Path) -> dict[str, Any]:
    """A run's ``job.json`` as a dict; ``JobError`` naming the file if it is not one."""
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
        record = safe_json.loads(data.decode("utf-8"))
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
    def tokenizer_dir(self) -> Path:
        """``<run>/tokenizer/``: the tokenizer an imported run came with (when it has one)."""
        return self.path / "tokenizer"

    @property
    def log_path(self) -> Path:
        return self.path / "logs" / "run.log"

    def exists(self) -> bool:
        return self.record_path.exists()

    def check_own_folder(self) -> None:
        """A run reads and writes only its own folder: a link in it (``checkpoints`` made a
        link to another run's) or the folder itself linked to another run's is refused in
        one line, before anything is read or written through it."""
        if self.path.is_symlink():
            target = self.path.resolve()
            if target.parent == (self.root / "runs").resolve() and target.name != self.name:
                raise JobError(
                    f"{self.path} is a link to run {target.name!r}'s folder ({target}): a run "
                    "writes only into its own folder (remove the link, or use that run's name)"
                )
        if not self.path.is_dir():
            return
        own = self.path.resolve()
        for folder, folders, files in os.walk(self.path):  # links at any depth, not followed
            for name in sorted([*folders, *files]):
                entry = Path(folder) / name
                if entry.is_symlink() and not entry.resolve().is_relative_to(own):
                    raise JobError(
                        f"{entry} is a link to {entry.resolve()}, outside run {self.name!r}'s "
                        "folder: a run writes only into its own folder (put what it links to "
                        "there in place of the link, or choose another --name)"
                    )

    def checkpointed_steps(self) -> list[int]:
        """The steps with a committed checkpoint: the one definition every reader uses.

        See :func:`committed_steps`; the contents are verified when a step is restored."""
        return committed_steps(self.checkpoint_dir)

    def read_config(self) -> dict[str, Any]:
        """The saved ``config.yaml`` as a mapping; a ``JobError`` naming the file if not."""
        import yaml

        path = self.config_path
        try:
            data = path.read_bytes()
        except FileNotFoundError as error:
            raise JobError(f"run {self.name!r} has no config.yaml ({path})") from error
        except OSError as error:
            raise JobError(f"{path} cannot be read: {error.strerror or error}") from error
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            raise JobError(f"{path} is not UTF-8 text (line {line})") from error
        try:
            saved = safe_yaml.load(text)  # aliases expanded within bounds
        except yaml.YAMLError as error:
            raise JobError(f"{path} is not valid YAML: {safe_yaml.problem(error)}") from error
        if not isinstance(saved, dict) or not saved:
            what = "empty" if not saved else f"a YAML {type(saved).__name__}, not a mapping"
            raise JobError(f"{path} is {what}")
        return saved

    # the record
    def read_record(self) -> dict[str, Any]:
        if not self.record_path.exists():
            raise JobError(missing_run(self))
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


def missing_run(run: RunDir) -> str:
    """Why ``run`` cannot be read, in one line: there is no such run, or its folder lost its
    ``job.json`` (what the folder still holds, and how to get the record back)."""
    if not run.path.is_dir():
        return f"no run named {run.name!r} under {run.root}"
    held = sorted(entry.name for entry in run.path.iterdir() if not entry.name.startswith("."))
    steps = run.checkpointed_steps()
    shown = [f"checkpoints {', '.join(map(str, steps))}" if n == "checkpoints" and steps else n
             for n in held]  # fmt: skip
    listing = ", ".join(shown[:6]) + (", ..." if len(shown) > 6 else "") or "nothing"
    rebuild = (
        f", or rebuild it from config.yaml and the checkpoints with `theseus rebuild-record "
        f"{run.name} --root {run.root}`"
        if run.config_path.is_file()
        else ""
    )
    return (
        f"run {run.name!r} under {run.root} has no job.json (its record), but its folder "
        f"holds {listing}: restore {run.record_path} from a copy{rebuild}"
    )
