"""Checkpoints are verified when restored.

Before: a checkpoint with flipped bytes loaded (its data decoded to other numbers) and the
run went on from it; a NaN that followed said "the last good checkpoint is kept" about the
corrupt one; with every checkpoint unreadable the error was 71 lines; branching with another
model size called every checkpoint "unreadable".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.faults.test_locks import snapshot
from tests.faults.test_resume_faults import ARGS, args_with, clone, last_line
from tests.train.conftest import final_params, run_cli


@pytest.fixture(scope="module")
def finished(shared_root) -> Path:
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", "ckpt-base")
    assert done.returncode == 0, done.stderr[-3000:]
    return shared_root / "runs" / "ckpt-base"


def largest_data_file(checkpoint: Path) -> Path:
    files = [p for p in (checkpoint / "state").rglob("*") if p.is_file()]
    return max(files, key=lambda p: p.stat().st_size)


def flip_bytes(path: Path, count: int = 4) -> None:
    """Flip the low bit of ``count`` bytes in the middle of ``path``, keeping its mtime."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    for offset in range(count):
        data[len(data) // 2 + offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_flipped_bytes_are_caught_set_aside_and_the_run_replays_bitwise(shared_root, finished):
    run = clone(finished, "ckpt-flipped")
    original = final_params(shared_root, run.name)  # checkpoint 4 as it was written
    flip_bytes(largest_data_file(run / "checkpoints" / "4"))
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checkpoint 4 in" in done.stderr and "differ from what was saved" in done.stderr
    assert (run / "checkpoints.torn" / "4").is_dir()
    assert "resumed ckpt-flipped from step 2" in done.stderr
    redone = final_params(shared_root, run.name)  # steps 2 and 3 trained again
    assert redone.keys() == original.keys()
    for key in original:
        np.testing.assert_array_equal(redone[key], original[key], err_msg=key)


def test_every_checkpoint_unreadable_is_one_line_and_moves_nothing(shared_root, finished):
    run = clone(finished, "ckpt-unreadable")
    for step in ("2", "4"):
        for path in (run / "checkpoints" / step / "state").rglob("*"):
            if path.is_file():
                path.write_bytes(b"")  # every file of the state emptied
    before = snapshot(run)
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name)
    assert done.returncode == 2, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith(f"error: no checkpoint in {run / 'checkpoints'} can be restored (4 (")
    assert line.endswith(
        "nothing was moved: if the files are damaged, rerun with --fresh to start over"
    )
    assert not (run / "checkpoints.torn").exists()
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k.startswith("checkpoints/")} == {
        k: v for k, v in before.items() if k.startswith("checkpoints/")
    }


def test_a_nan_right_after_a_restore_names_the_checkpoint(shared_root, finished):
    """A checkpoint that verifies (its digests were written from NaN parameters) but NaNs
    at once: the one-line error names it as the suspect, not "the last good checkpoint"."""
    import jax
    import orbax.checkpoint as ocp

    run = clone(finished, "ckpt-nan")
    step_dir = run / "checkpoints" / "4"
    state = ocp.StandardCheckpointer().restore(step_dir / "state")
    state["params"] = jax.tree.map(lambda x: np.full_like(x, np.nan), state["params"])
    meta = json.loads((step_dir / "meta" / "metadata").read_text())
    from theseus.core.train.checkpoints import describe_arrays

    arrays = describe_arrays({"state": state})
    meta["arrays"].update(arrays)
    shutil.rmtree(step_dir / "state")
    ocp.StandardCheckpointer().save(step_dir / "state", state)
    ocp.StandardCheckpointer().wait_until_finished()
    (step_dir / "meta" / "metadata").write_text(json.dumps(meta))
    longer = ["training.total_steps=6", "training.schedule_on_resume=stretch"]
    done = run_cli(shared_root, *ARGS, *longer, "--name", run.name)
    assert done.returncode == 2, "\n".join(
        x for x in done.stderr.splitlines() if not x.startswith("step=")
    )
    assert last_line(done).startswith(
        f"error: loss is nan at step 4 of run {run.name}, the first step after restoring "
        f"checkpoint 4 ({step_dir}): that checkpoint is suspect"
    )


def test_branching_into_another_model_size_names_the_array(shared_root, finished):
    parent_before = snapshot(finished)
    done = run_cli(
        shared_root,
        *args_with("training.total_steps=6", "model.d_model=32"),
        "--name",
        "ckpt-branch",
        "--branch",
        "ckpt-base",
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith(f"error: --branch: checkpoint 4 in {finished / 'checkpoints'} holds ")
    assert "float32[" in line and "but this config builds float32[" in line
    assert line.endswith("it was saved by another model or optimizer config")
    assert snapshot(finished) == parent_before  # the parent is only read
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("total", [4, 2])
def test_a_branch_that_would_end_where_it_starts_is_refused_in_one_line(
    shared_root, finished, total
):
    """Before (issue 37): ``--branch base@4 training.total_steps=2`` exited 0 with "steps
    4 -> 2" and a summary.json holding ``null`` for the loss."""
    done = run_cli(
        shared_root, *args_with(f"training.total_steps={total}"),
        "--name", f"ckpt-short-{total}", "--branch", "ckpt-base@4",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert last_line(done) == (
        f"error: --branch ckpt-base@4: the branch starts at step 4, and "
        f"training.total_steps={total} ends it there or before: give training.total_steps "
        "above 4"
    )
    assert not (shared_root / "runs" / f"ckpt-short-{total}").exists()
