"""A signal stops a tokenization: Ctrl-C (SIGINT to the process group) or SIGTERM (to the
job alone). It stops within its grace period, says so in one line (exit 3, status
preempted), keeps the units it published usable, and leaves no process behind.

Before: SIGINT was ignored (the tokenization ran all its remaining units, exited 0 and said
nothing); SIGTERM ended it at once with exit 143 and no word, and its worker and
multiprocessing resource-tracker processes stayed alive (one pair 38 minutes later).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from theseus.data.tokenize.units import TEST_GATE_ENV, TEST_GATE_UNIT_ENV
from theseus.data.tokenize.workers import STOP_GRACE_SECONDS

from tests.data.test_streaming import TOKENIZE, _no_process_left, theseus, wait_for  # noqa: F401

GATED = 5  # units 0-4 are tokenized; from 5 on they wait for a gate that never opens


def published(root: Path) -> int:
    """Units the job has published (its progress record), 0 before any."""
    found = list((root / "data" / "python-stdlib").glob("*/progress.json"))
    try:
        return int(json.loads(found[0].read_text())["units"]) if found else 0
    except (OSError, ValueError, KeyError):
        return 0


def alive_in_group(group: int) -> list[str]:
    """The processes of process group ``group`` that are not dead (zombies are dead: a
    container's first process may never reap them)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp...
        if int(fields[2]) == group and fields[0] != "Z":
            alive.append(f"{entry.name} {stat.split(')', 1)[0].split('(', 1)[1]} {fields[0]}")
    return alive


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-group", "sigterm-to-the-job"],
)
def test_a_signal_stops_a_tokenization_in_one_line_keeping_what_it_published(
    tmp_path, sig, to_group
):
    from theseus.core.data.reader import TokenizedDataset

    root = tmp_path / "root"
    args = [*TOKENIZE[:-2], "data.num_workers=2", "data.unit_bytes=1", "--name", "tok"]
    env = {TEST_GATE_ENV: str(tmp_path / "never"), TEST_GATE_UNIT_ENV: str(GATED)}
    job = theseus(root, *args, env=env)
    wait_for(lambda: published(root) >= GATED, "the units before the gate", job)
    (os.killpg if to_group else os.kill)(job.pid, sig)
    started = time.time()
    output, _ = job.communicate(timeout=60)
    took = time.time() - started

    assert job.returncode == 3 and took < STOP_GRACE_SECONDS + 20, (took, output[-3000:])
    name = signal.Signals(sig).name
    lines = output.strip().splitlines()
    assert lines[-1] == (
        f"error: run tok stopped by a signal ({name}): {GATED} units published and usable, "
        "the others not tokenized yet; rerun the same command to resume"
    ), output[-3000:]
    assert f"{name}: stopping the tokenization of python-stdlib" in output
    assert "Traceback" not in output
    record = json.loads((root / "runs" / "tok" / "job.json").read_text())
    assert record["status"] == "preempted"
    # no worker, no resource tracker: nothing of the job's process group is left
    assert wait_for_nothing_alive(job.pid) == []
    # what was published is readable: its documents, with ids in the vocabulary
    (progress,) = (root / "data" / "python-stdlib").glob("*/progress.json")
    data = TokenizedDataset(progress.parent, verify="none", wait=True)
    shards = data.splits["train"] + data.splits["validation"]
    documents = sum(len(shard.doc_starts) for shard in shards)
    assert documents == GATED and not data.complete
    tokens, _ = shards[0].document(0)
    assert len(tokens) > 0 and int(tokens.max()) < data.vocab_size
    if to_group:  # the same command resumes it, from the units it kept
        done = theseus(root, *args)
        output, _ = done.communicate(timeout=240)
        assert done.returncode == 0, output[-3000:]
        assert f"{GATED} by an earlier run" in output, output[-3000:]


def wait_for_nothing_alive(group: int, timeout: float = 10.0) -> list[str]:
    """The processes of ``group`` still alive after at most ``timeout`` seconds."""
    deadline = time.time() + timeout
    while (alive := alive_in_group(group)) and time.time() < deadline:
        time.sleep(0.1)
    return alive
