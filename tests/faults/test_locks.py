"""Two processes never write one run or one dataset: the second gets one line and exit 2.

Before the locks, two ``theseus run`` with one ``--name`` interleaved their metrics and the
loser died in an Orbax rename with a traceback; two tokenizations of one dataset crashed on
``tokenizer.tmp``. A lock left by a killed process is taken over by the next run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from theseus.core.locks import exclusive, lock_path

from tests.train.conftest import TINY, run_cli

HOLD = """
import sys, time
from pathlib import Path
from theseus.core.locks import exclusive
with exclusive(Path(sys.argv[1]), "x", "y"):
    print("held", flush=True)
    time.sleep(600)
"""


def holder(directory: Path) -> subprocess.Popen:
    """Another process holding ``directory``'s lock until it is killed."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "held"
    return process


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_a_run_in_use_is_refused_in_one_line_and_left_untouched(shared_root):
    args = ["run", "gpt/train/pretrain", *TINY, "eval.every=0"]
    assert run_cli(shared_root, *args, "training.total_steps=2", "--name", "locked").returncode == 0
    longer = ["training.total_steps=4", "training.schedule_on_resume=stretch"]
    run = shared_root / "runs" / "locked"
    before = snapshot(run)
    process = holder(run)
    try:
        again = run_cli(shared_root, *args, *longer, "--name", "locked")
    finally:
        process.kill()
        process.wait()
    assert again.returncode == 2
    line = again.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: run 'locked' under {shared_root} is in use by pid ")
    assert f"pid {process.pid} on host " in line and line.endswith("choose another --name")
    assert snapshot(run) == before  # nothing was written: record, config, metrics, checkpoints

    # the holder was killed: its lock is gone with it, and the run resumes to 4 steps
    resumed = run_cli(shared_root, *args, *longer, "--name", "locked")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "job.json").read_text())["status"] == "finished"
    assert not lock_path(run).with_suffix(".owner").exists()


def test_a_dataset_being_tokenized_is_refused_in_one_line(tmp_path):
    from theseus.core.plugins import registries
    from theseus.data.prepare import output_of

    root = tmp_path / "root"
    overrides = ["data.max_documents=4", "data.suffix=locked", "tokenizer.name=byte"]
    out = Path(output_of("data/tokenize/python-stdlib", overrides, root, registries()))
    process = holder(out)
    try:
        done = run_cli(root, "run", "data/tokenize/python-stdlib", *overrides)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: dataset directory {out} is in use by pid {process.pid} ")
    assert not out.exists()  # the refused job wrote nothing


def test_in_process_the_lock_is_exclusive_and_released(tmp_path):
    from theseus.core.locks import LockedError

    target = tmp_path / "runs" / "r"
    with exclusive(target, "run 'r'", "hint"):
        try:
            with exclusive(target, "run 'r'", "hint"):
                raise AssertionError("a second holder got the lock")
        except LockedError as error:
            assert "in use by pid" in str(error)
    started = time.perf_counter()
    with exclusive(target, "run 'r'", "hint"):  # released: taken again at once
        assert time.perf_counter() - started < 1.0
