"""Training while the corpus is tokenized: the same batches and losses as after, waits said
in the log, a second writer refused, a dead tokenization stopping the trainer in one line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from datatest_helpers import data_config
from theseus.core.data import DataIncompleteError
from theseus.core.data.api import open_training_data
from theseus.core.data.sampling import BlockSampler
from theseus.core.locks import LockedError
from theseus.core.runner import run
from theseus.data.tokenize.units import TEST_DELAY_ENV, TEST_GATE_ENV, TEST_GATE_UNIT_ENV

REPO = Path(__file__).resolve().parents[2]
# One document per unit (unit_bytes=1), so the units arrive one by one.
TOKENIZE = [
    "data/tokenize/python-stdlib",
    "data.max_documents=12",
    "tokenizer.vocab_size=384",
    "data.num_workers=1",
    "data.unit_bytes=1",
]
DATA = ["data.max_documents=12", "data.vocab_size=384", "data.num_workers=1"]
# 40 steps x 16 rows of 65 tokens: about 10 of the 12 documents, inside the first pass;
# shuffle blocks of one step, so each step needs the units up to its own rows only.
TRAIN = [
    "gpt/train/pretrain",
    "model.n_layers=2",
    "model.d_model=64",
    "model.n_heads=2",
    "model.max_seq_len=64",
    "training.seq_len=64",
    "training.global_batch_size=16",
    "training.total_steps=40",
    "checkpoint.every=20",
    "eval.batches=1",
    "logging.every=1",
    "logging.progress=false",
    "data.shuffle_rows=16",
    *DATA,
]
CONFIG = {"max_documents": 12, "vocab_size": 384, "num_workers": 1, "shuffle_rows": 16}


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_process_left():
    """A failing test kills what it started (tokenize workers included)."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def theseus(root: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "theseus.cli.main", "run", *args, "--root", str(root)],
        env={**os.environ, **(env or {})},
        cwd=REPO,
        start_new_session=True,  # its tokenize workers die with it (killpg)
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    STARTED.append(process)
    return process


def wait_for(condition, what: str, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"ended before {what}: {process.stdout.read()[-3000:]}")
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def claimed(root: Path) -> bool:
    """The tokenize job has its tokenizer (nothing is published before unit 1: document 0
    goes to validation, and publishing waits for the first training document)."""
    return any((root / "data" / "python-stdlib").glob("*/progress.json"))


def trained_to(root: Path, name: str) -> int:
    """The last step the run has logged (-1 before any)."""
    try:
        return max((r["step"] for r in rows(root, name) if "train/loss" in r), default=-1)
    except (OSError, ValueError):
        return -1


def waiting(root: Path, name: str) -> bool:
    log = root / "runs" / name / "logs" / "run.log"
    return log.exists() and "waiting for the tokenization" in log.read_text()


def rows(root: Path, name: str) -> list[dict]:
    path = root / "runs" / name / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def losses(root: Path, name: str) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in rows(root, name) if "train/loss" in r}


@pytest.mark.slow
def test_training_while_tokenizing_gives_the_batches_and_losses_of_training_after(tmp_path):
    from tests.train.conftest import final_params

    root, gate = tmp_path / "root", tmp_path / "gate"
    # units 0-6 at once (the rows of 18 steps), then nothing until the trainer is past step
    # 10, then a unit every 0.3 s: it waits mid-training, more than once
    slow = {TEST_GATE_ENV: str(gate), TEST_GATE_UNIT_ENV: "7", TEST_DELAY_ENV: "0.3"}
    tokenizer = theseus(root, *TOKENIZE, env=slow)
    wait_for(lambda: claimed(root), "the tokenize job claimed its folder", tokenizer)
    during = theseus(root, *TRAIN, "--name", "during")
    with pytest.raises(LockedError, match="is in use by pid"):  # a second writer is refused
        run(TOKENIZE[0], TOKENIZE[1:], root=root, name="second-writer")

    config = data_config(**CONFIG)
    reader = open_training_data(root, config, seq_len=64, batch=16, seed=0)
    wait_for(lambda: trained_to(root, "during") >= 10, "the trainer's step 10", during)
    time.sleep(1.0)  # it runs into the missing units and waits
    gate.touch()
    read_during = [reader.batch(step) for step in range(40)]  # waits for units as they come
    assert reader.waits.episodes > 0  # this reader waited too

    out, _ = tokenizer.communicate(timeout=240)
    assert tokenizer.returncode == 0, out[-3000:]
    out, _ = during.communicate(timeout=300)
    assert during.returncode == 0, out[-3000:]
    assert "training reads it as it is written" in out
    assert re.search(r"waiting for the tokenization \(unit \d+ of at least \d+ tokenized\)", out)

    after = open_training_data(root, config, seq_len=64, batch=16, seed=0)
    for step, batch in enumerate(read_during):
        for key, value in after.batch(step).items():
            np.testing.assert_array_equal(batch[key], value, err_msg=f"step {step} {key}")

    run(TRAIN[0], TRAIN[1:], root=root, name="after")
    assert losses(root, "during") == losses(root, "after")  # bit for bit (exact floats)
    vals = [[r["val/loss"] for r in rows(root, n) if "val/loss" in r] for n in ("during", "after")]
    assert vals[0] == vals[1] and len(vals[0]) >= 1
    one, two = final_params(root, "during"), final_params(root, "after")
    assert one.keys() == two.keys()
    for key in one:
        np.testing.assert_array_equal(one[key], two[key], err_msg=key)
    waits = {r["step"]: r["data/wait_s"] for r in rows(root, "during") if "data/wait_s" in r}
    waited = max(waits.values())
    by_step_10 = max((w for s, w in waits.items() if s <= 10), default=0.0)
    assert waited > by_step_10 + 0.5  # it waited after step 10, for the gated units
    print(f"the run started while tokenizing waited {waited:.2f} s for units")
    record = root / "runs" / "during" / "data-identity.json"
    content = json.loads(record.read_text())["datasets"][0]["content"]
    metadata = json.loads((after.datasets[0].path / "metadata.json").read_text())
    assert content in (None, metadata["content"])  # known if it completed while training
    open_training_data(
        root, config, seq_len=64, batch=16, seed=0, run_dir=record.parent
    )  # as a resume does: the record now holds the finished data's content
    assert json.loads(record.read_text())["datasets"][0]["content"] == metadata["content"]


@pytest.mark.slow
def test_a_killed_tokenization_stops_the_trainer_in_one_line(tmp_path):
    root, gate = tmp_path / "root", tmp_path / "never"
    tokenizer = theseus(root, *TOKENIZE, env={TEST_GATE_ENV: str(gate)})
    wait_for(lambda: claimed(root), "the tokenize job claimed its folder", tokenizer)
    trainer = theseus(root, *TRAIN, "--name", "orphan")
    wait_for(lambda: waiting(root, "orphan"), "the trainer waited for units", trainer)
    os.killpg(tokenizer.pid, signal.SIGKILL)
    tokenizer.wait()
    output, _ = trainer.communicate(timeout=120)
    assert trainer.returncode == 2, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert "is incomplete and no process is writing it" in last, output[-3000:]
    assert re.search(r"the tokenization stopped at unit 0 of at least \d+ tokenized", last)
    assert "theseus run data/tokenize/python-stdlib" in last
    assert "Traceback" not in output
    record = json.loads((root / "runs" / "orphan" / "job.json").read_text())
    assert record["status"] == "failed"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_trainer_waiting_for_a_stalled_tokenization(tmp_path, sig):
    """Before: "checkpointing and stopping" was logged, then the trainer kept waiting for the
    data (still alive ten minutes later), past any cluster's grace period before SIGKILL."""
    root, gate = tmp_path / "root", tmp_path / "never"
    tokenizer = theseus(root, *TOKENIZE, env={TEST_GATE_ENV: str(gate)})
    wait_for(lambda: claimed(root), "the tokenize job claimed its folder", tokenizer)
    trainer = theseus(root, *TRAIN, "--name", "stalled")
    wait_for(lambda: waiting(root, "stalled"), "the trainer waited for units", trainer)
    os.killpg(trainer.pid, sig)
    started = time.time()
    output, _ = trainer.communicate(timeout=60)
    took = time.time() - started
    assert trainer.returncode != 0 and took < 30, (took, output[-3000:])
    assert f"stopped by a signal ({signal.Signals(sig).name}) at step 0" in output, output[-3000:]
    assert "Traceback" not in output
    record = json.loads((root / "runs" / "stalled" / "job.json").read_text())
    assert record["status"] == "preempted"
    assert tokenizer.poll() is None  # the tokenize job is another run: left to its own signals


class GrowingStream:
    """A stream whose items arrive in batches, as a tokenize job publishes them."""

    def __init__(self, total: int, published: int) -> None:
        self.total, self.published, self.complete = total, published, False

    def ensure(self, count: int) -> None:
        if self.published < count and not self.complete:
            self.published = self.total  # the rest arrives (the reader would wait for it)
            self.complete = True

    def known(self) -> int:
        return self.published

    def describe(self) -> str:
        return "a growing stream"


@pytest.mark.parametrize("published", [16, 40, 97, 100])
def test_rows_depend_on_the_items_they_need_not_on_how_many_exist(published):
    """Rows of block g read the same items whether g's items just arrived or all did."""
    rows_needed = np.arange(0, 300)  # blocks of 16 over 100 items, then later epochs
    finished = BlockSampler(seed=5, block=16)(rows_needed, GrowingStream(100, 100))
    growing = BlockSampler(seed=5, block=16)
    stream = GrowingStream(100, published)
    for start in range(0, 300, 8):  # a step at a time
        part = growing(rows_needed[start : start + 8], stream)
        np.testing.assert_array_equal(part, finished[start : start + 8])
    first_pass = finished[:100]
    assert sorted(first_pass.tolist()) == list(range(100))  # every item once per pass
    for g in range(6):  # block g holds its own items, shuffled
        block = first_pass[16 * g : 16 * (g + 1)]
        assert sorted(block.tolist()) == list(range(16 * g, 16 * (g + 1)))
    assert sorted(finished[100:200].tolist()) == list(range(100))


def test_an_incomplete_dataset_without_a_writer_is_refused_at_once(tmp_path, stdlib_root):
    """Data left incomplete by a dead tokenization is not waited for: one line, at once."""
    import shutil

    from theseus.core.data.api import find_dataset

    source = find_dataset(stdlib_root, "python-stdlib")
    copy = tmp_path / source.relative_to(stdlib_root)
    shutil.copytree(source, copy)
    (copy / "metadata.json").unlink()
    started = time.perf_counter()
    with pytest.raises(DataIncompleteError, match="no process is writing it") as error:
        open_training_data(
            tmp_path,
            data_config(vocab_size=512, max_documents=40, validation_fraction=0.1),
            seq_len=64,
            batch=8,
            seed=0,
        )
    assert time.perf_counter() - started < 5 and "\n" not in str(error.value)
