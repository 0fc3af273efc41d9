"""Failures of the machine and of odd values: one line, exit 2, nothing lost.

Before: ``model.dtype=float8`` printed 116 lines; a root under /proc, in a read-only folder
or on a file gave tracebacks; a full disk printed 2,218 lines (the checkpoint survived).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_locks import snapshot
from tests.faults.test_resume_faults import ARGS, args_with, last_line
from tests.train.conftest import run_cli


@contextlib.contextmanager
def tmpfs(path: Path, *options: str) -> Iterator[Path]:
    """A small tmpfs at ``path`` (needs root, as CI is; skipped elsewhere, saying why)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); CI runs as root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write one file until the file system has no byte left."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * size)
    finally:
        os.close(descriptor)
    return filler


def train_steps_of(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if "train/loss" in row]


def test_an_unknown_compute_dtype_is_one_line_before_anything_runs(shared_root):
    done = run_cli(shared_root, *ARGS, "model.dtype=float8", "--name", "env-float8")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: model.dtype='float8': expected one of auto, float32, bfloat16, float16"
    )
    assert not (shared_root / "runs" / "env-float8").exists()


@pytest.mark.parametrize("where", ["/proc/theseus-root", "file"])
def test_a_root_that_cannot_be_written_is_one_line(tmp_path, where):
    root = Path(where) if where.startswith("/") else tmp_path / "a-file"
    if where == "file":
        root.write_text("not a folder")
    done = run_cli(root, "run", "example/fit-line", "task.steps=2")
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip()
    if where == "file":
        assert line == f"error: root {root} is a file, not a directory: choose another --root"
        assert root.read_text() == "not a folder"
    else:
        assert line.startswith(f"error: cannot write to root {root} (")
        assert "--root" in line


def test_a_read_only_root_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "ro", "size=1m") as root:
        done = run_cli(root, "run", "example/fit-line", "task.steps=2")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (
        f"error: cannot write to root {root} (read-only file system): the file system is "
        "read-only: use a writable --root"
    )


def test_a_full_disk_is_one_line_and_the_run_resumes_once_space_is_freed(tmp_path):
    with tmpfs(tmp_path / "small", "size=64m") as root:
        args = args_with("training.total_steps=2")
        first = run_cli(root, *args, "--name", "full")
        assert first.returncode == 0, first.stderr[-3000:]
        run = root / "runs" / "full"
        before = snapshot(run)
        filler = fill(root)
        done = run_cli(root, *args_with("training.total_steps=4"), "--name", "full")
        assert done.returncode == 2, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert last_line(done).startswith("error: no space left on device")
        assert last_line(done).endswith("then rerun the same command to resume")
        kept = snapshot(run)
        for name in ("config.yaml", "metrics.jsonl"):
            assert kept[name] == before[name], name
        assert {k: v for k, v in kept.items() if k.startswith("checkpoints/2/")} == {
            k: v for k, v in before.items() if k.startswith("checkpoints/2/")
        }
        filler.unlink()
        again = run_cli(root, *args_with("training.total_steps=4"), "--name", "full")
        assert again.returncode == 0, again.stderr[-3000:]
        assert train_steps_of(run) == [0, 1, 2, 3]
