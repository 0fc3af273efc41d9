"""The reproducible bundle: the workspace as it is now, with its lockfile.

Files come from ``git ls-files --cached --others --exclude-standard`` (tracked files with
their uncommitted changes, plus new files git does not ignore), or a walk of the tree
outside git. Run outputs, virtual environments and caches never travel. The archive is
deterministic (sorted names, zero mtimes and owners), so its SHA-256 names it: the same
workspace gives the same bundle, and a target extracts each bundle once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from theseus.core.errors import TheseusError

EXCLUDED_DIRS = {
    ".git",
    ".venv",
    "runs",
    "__pycache__",
    ".jax_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    "dist",
    "build",
}


class BundleError(TheseusError):
    """The workspace cannot be bundled."""


@dataclass
class Bundle:
    data: bytes
    sha: str
    files: list[str]

    @property
    def short(self) -> str:
        return self.sha[:16]


def find_workspace(start: Path | None = None) -> Path:
    """The nearest directory upwards holding ``uv.lock`` (the uv workspace root)."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "uv.lock").exists() and (directory / "pyproject.toml").exists():
            return directory
    raise BundleError(
        f"no uv workspace (pyproject.toml with uv.lock) at or above {here}: "
        "run `theseus submit` inside the project (run `uv lock` first)"
    )


def _excluded(rel: str, extra: set[str]) -> bool:
    parts = rel.split("/")
    if any(p in EXCLUDED_DIRS for p in parts[:-1]):
        return True
    if rel.endswith((".pyc", ".pyo")):
        return True
    return any(rel == e or rel.startswith(e + "/") for e in extra)


def workspace_files(workspace: Path, exclude: set[str] | None = None) -> list[str]:
    extra = set(exclude or ())
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=workspace,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout.decode()
        names = [n for n in listed.split("\0") if n]
    except (OSError, subprocess.SubprocessError):
        names = []
        for directory, dirs, files in os.walk(workspace):
            dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS]
            for f in files:
                names.append(os.path.relpath(os.path.join(directory, f), workspace))
    names.append("uv.lock")
    kept = set()
    for name in names:
        path = workspace / name
        if _excluded(name, extra) or not path.is_file() or path.is_symlink():
            continue  # deleted in the working tree, or a link out of the tree
        kept.add(name)
    return sorted(kept)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def make_bundle(
    workspace: Path, exclude: set[str] | None = None, secrets: dict[str, str] | None = None
) -> Bundle:
    """Archive the workspace. The run's resolved config travels next to it (see launch.py).

    ``secrets`` are values that must not travel: a file containing one is refused.
    """
    files = workspace_files(workspace, exclude)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in files:
            path = workspace / name
            data = path.read_bytes()
            for key, value in (secrets or {}).items():
                if value and len(value) >= 8 and value.encode() in data:
                    raise BundleError(
                        f"{name} contains the value of the secret {key}; remove it before submitting"
                    )
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            _add(tar, name, data, mode)
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, compresslevel=6) as gz:
        gz.write(raw.getvalue())
    data = packed.getvalue()
    return Bundle(data=data, sha=hashlib.sha256(data).hexdigest(), files=files)
