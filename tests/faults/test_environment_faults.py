"""Failures of the machine and of odd values: one line, exit 2, nothing lost.

Before: ``model.dtype=float8`` printed 116 lines; a root under /proc, in a read-only folder
or on a file gave tracebacks; a full disk printed 2,218 lines (the checkpoint survived).
Issue 24: a disk that fills *during* training printed 845 lines with 67 tracebacks (an
asynchronous checkpoint), 459 with 35 (a synchronous one) and 66 with 5 (tokenization).
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
from tests.faults.test_resume_faults import ARGS, STRETCH, args_with, last_line
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


def fill(directory: Path, leave: int = 0) -> Path:
    """Write one file until the file system has no byte left, then give ``leave`` bytes
    back (so that a run can write a little before the disk is full)."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * size)
        os.ftruncate(descriptor, max(0, os.fstat(descriptor).st_size - leave))
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


@pytest.fixture(scope="module")
def small_root(tmp_path_factory) -> Iterator[Path]:
    """A 64 MB tmpfs root with the tiny corpus tokenized (by a 1-step run), for the cases
    that fill the disk while a job writes."""
    with tmpfs(tmp_path_factory.mktemp("small-disk") / "root", "size=64m") as root:
        done = run_cli(root, *args_with("training.total_steps=1"), "--name", "tokenizes")
        assert done.returncode == 0, done.stderr[-3000:]
        yield root


def test_a_full_disk_is_one_line_and_the_run_resumes_once_space_is_freed(small_root):
    root = small_root
    args = args_with("training.total_steps=2")
    first = run_cli(root, *args, "--name", "full")
    assert first.returncode == 0, first.stderr[-3000:]
    run = root / "runs" / "full"
    before = snapshot(run)
    filler = fill(root)
    try:
        done = run_cli(root, *args_with("training.total_steps=4", STRETCH), "--name", "full")
    finally:
        kept = snapshot(run)
        filler.unlink()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert last_line(done).startswith("error: no space left on device")
    assert last_line(done).endswith("then rerun the same command to resume")
    for name in ("config.yaml", "metrics.jsonl"):
        assert kept[name] == before[name], name
    assert {k: v for k, v in kept.items() if k.startswith("checkpoints/2/")} == {
        k: v for k, v in before.items() if k.startswith("checkpoints/2/")
    }
    again = run_cli(root, *args_with("training.total_steps=4", STRETCH), "--name", "full")
    assert again.returncode == 0, again.stderr[-3000:]
    assert train_steps_of(run) == [0, 1, 2, 3]


# what a run prints before the disk fills: its progress, never a traceback
PROGRESS = (
    "step=",
    "resum",
    "training ",
    "prerequisite ",
    "run ",
    "running ",
    "verified ",
    "tokenizing ",
)


def disk_full_line(done) -> list[str]:
    """The lines a job printed, checked: exit 2, no traceback, the one error line last, and
    nothing else but progress lines before it."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert lines[-1] == (
        "error: no space left on device: free some space (or use another --root), then rerun "
        "the same command to resume"
    )
    noise = [line for line in lines[:-1] if not line.startswith(PROGRESS)]
    assert not noise, noise
    return lines


@pytest.mark.parametrize("asynchronous", ["true", "false"])
def test_a_disk_that_fills_during_training_is_one_line_and_nothing_is_lost(
    small_root, asynchronous
):
    name = f"fills-{asynchronous}"
    args = args_with(
        "training.total_steps=6",
        "checkpoint.every=1",
        "checkpoint.keep_last=6",
        f"checkpoint.asynchronous={asynchronous}",
    )
    filler = fill(small_root, leave=3 << 20)  # room for a checkpoint or two (1.6 MB each)
    try:
        done = run_cli(small_root, *args, "--name", name)
    finally:
        filler.unlink()
    disk_full_line(done)
    run = small_root / "runs" / name
    if asynchronous == "true":  # the save that failed in the background: resumed past it
        again = run_cli(small_root, *args, "--name", name)
        assert again.returncode == 0, again.stderr[-3000:]
        assert sorted(set(train_steps_of(run))) == list(range(6))


def test_a_disk_that_fills_during_tokenization_is_one_line(small_root):
    datasets = [p for p in (small_root / "data").iterdir() if not p.name.startswith(".")]
    before = {p.name: snapshot(p) for p in datasets}
    filler = fill(small_root, leave=128 << 10)
    try:
        args = args_with("data.max_documents=80", "data.suffix=more", "training.total_steps=1")
        done = run_cli(small_root, *args, "--name", "tokenize-full")
    finally:
        filler.unlink()
    disk_full_line(done)
    after = {p.name: snapshot(p) for p in datasets}
    for name, files in after.items():
        kept = variants(before[name])
        kept.discard(".locks")  # a lock file per variant tokenized, even in vain
        assert {k: v for k, v in files.items() if k.split("/")[0] in kept} == {
            k: v for k, v in before[name].items() if not k.startswith(".locks/")
        }
        for variant in variants(files) - kept:  # published so far and said so: not finished
            assert not (small_root / "data" / name / variant / "metadata.json").exists()
    again = run_cli(small_root, *args, "--name", "tokenize-full")  # the promised rerun
    assert again.returncode == 0, again.stderr[-3000:]


def variants(files: dict[str, bytes]) -> set[str]:
    """The variant folders a dataset snapshot holds (the first part of each path)."""
    return {path.split("/")[0] for path in files}


def test_installing_both_cuda_plugins_is_refused_by_uv():
    """Before (issue 24): ``uv sync --all-packages --all-extras`` installed the cuda12 and
    cuda13 JAX plugins together, and every run then segfaulted without a message. The
    extras are declared conflicting, so uv refuses (checked against the lockfile, offline,
    installing nothing: ``--dry-run``)."""
    import shutil

    from tests.conftest import REPO

    if shutil.which("uv") is None:
        pytest.skip("uv is not on PATH")
    done = subprocess.run(
        ["uv", "sync", "--all-packages", "--all-extras", "--dry-run", "--offline", "--locked"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    said = " ".join(done.stderr.split())  # uv wraps its lines to the terminal's width
    assert "Extras `cuda12` and `cuda13` are incompatible with the declared conflicts" in said, said
