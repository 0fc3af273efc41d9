"""The training job: learning, metrics, checkpoints, preemption, resume, branches, errors."""

from __future__ import annotations

import json
import math
import signal

import pytest
from theseus.core.data.api import find_dataset

from tests.train.conftest import TINY, kill_after, metrics, run_cli, train_losses


def unigram_entropy(directory) -> float:
    """Entropy (nats) of the token frequencies of a packed dataset's training shards."""
    import numpy as np

    tokens = np.concatenate(
        [np.fromfile(p, dtype=np.uint16) for p in sorted(directory.glob("train-*.bin"))]
    )
    counts = np.bincount(tokens).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


STRETCH = "training.schedule_on_resume=stretch"  # a resume to another length re-plans the lr


def train(steps, *extra):
    return [
        "run",
        "gpt/train/pretrain",
        *TINY,
        f"training.total_steps={steps}",
        "eval.every=0",
        *extra,
    ]


def record(root, name):
    return json.loads((root / "runs" / name / "job.json").read_text())


LEARNS = [
    "run",
    "gpt/train/pretrain",
    *TINY,
    "training.total_steps=30",
    "optimizer.learning_rate=3e-3",
    "eval.every=10",
    "checkpoint.every=10",
]


@pytest.fixture(scope="module")
def learns(shared_root) -> str:
    """Run ``learns``: 30 steps, evaluated and checkpointed every 10 (the first test reads its
    learning, the branch test branches from it)."""
    result = run_cli(shared_root, *LEARNS, "--name", "learns")
    assert result.returncode == 0, result.stderr[-3000:]
    return "learns"


def test_tokenizes_first_then_trains_with_falling_loss_and_full_metrics(shared_root, learns):
    assert (shared_root / "data").is_dir()  # the prerequisite tokenized the corpus
    losses = train_losses(shared_root, "learns")
    assert len(losses) == 30
    first, last = losses[0], sum(losses[s] for s in range(25, 30)) / 5
    # Untrained, the loss is about ln(V); a model that learned only token frequencies scores
    # the unigram entropy H. Demand at least half of that gap closed within 30 steps.
    uniform, unigram = math.log(384), unigram_entropy(find_dataset(shared_root, "python-stdlib"))
    assert abs(first - uniform) < 0.25, first
    assert last < (uniform + unigram) / 2, (first, last, unigram)
    rows = metrics(shared_root, "learns")
    train_rows = [r for r in rows if "train/loss" in r]
    train_row = train_rows[1]  # the first step's row times the compile instead
    for key in ("train/grad_norm", "train/lr", "perf/tokens_per_sec", "perf/step_time", "perf/mfu"):
        assert key in train_row and math.isfinite(train_row[key])
    timed = [r for r in train_rows if "perf/mfu" in r]
    assert len(timed) >= 20 and all(r["perf/mfu"] > 0 for r in timed)
    # MFU = FLOPs per token x tokens/s / peak: the implied FLOPs per token is one constant.
    # (No "< 1": on CPU the peak is a matmul measured once; a busier machine then makes it
    # small, and a later quieter step can beat it.)
    implied = [r["perf/mfu"] / r["perf/tokens_per_sec"] for r in timed]
    assert max(implied) == pytest.approx(min(implied), rel=1e-9)
    val = [r["val/loss"] for r in rows if "val/loss" in r]
    assert len(val) >= 3 and val[-1] < val[0]
    checkpoints = sorted(p.name for p in (shared_root / "runs/learns/checkpoints").iterdir())
    assert checkpoints == ["10", "20", "30"]
    summary = json.loads((shared_root / "runs/learns/summary.json").read_text())
    assert summary["step"] == 30 and summary["train/loss"] == losses[29]
    assert record(shared_root, "learns")["status"] == "finished"


def test_sigterm_checkpoints_and_exits_with_a_distinct_code_then_resumes(shared_root):
    code = kill_after(
        shared_root, "preempted", train(400, "checkpoint.every=1000"), steps=3, sig=signal.SIGTERM
    )
    assert code == 3
    rec = record(shared_root, "preempted")
    assert rec["status"] == "preempted" and "checkpoint saved" in rec["error"]
    saved = [
        int(p.name)
        for p in (shared_root / "runs/preempted/checkpoints").iterdir()
        if p.name.isdigit()
    ]
    assert len(saved) == 1 and 3 <= saved[0] < 400
    resumed = run_cli(
        shared_root,
        *train(saved[0] + 2, "checkpoint.every=1000", STRETCH),
        "--name",
        "preempted",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed preempted from step {saved[0]}" in resumed.stderr
    assert max(train_losses(shared_root, "preempted")) == saved[0] + 1


def test_torn_latest_checkpoint_falls_back_and_none_readable_is_an_error(shared_root):
    assert run_cli(shared_root, *train(4, "checkpoint.every=2"), "--name", "torn").returncode == 0
    directory = shared_root / "runs/torn/checkpoints"
    for path in (directory / "4" / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"torn")
    more = run_cli(shared_root, *train(5, "checkpoint.every=2", STRETCH), "--name", "torn")
    assert more.returncode == 0, more.stderr[-3000:]
    assert "checkpoint 4" in more.stderr and "unreadable" in more.stderr
    assert "resumed torn from step 2" in more.stderr

    remaining = [p for p in directory.iterdir() if p.name.isdigit()]
    assert sorted(p.name for p in remaining) == ["2", "4", "5"]
    for checkpoint in remaining:
        for path in (checkpoint / "state").rglob("*"):
            if path.is_file():
                path.write_bytes(b"torn")
    broken = run_cli(shared_root, *train(6, "checkpoint.every=2", STRETCH), "--name", "torn")
    assert broken.returncode == 2
    assert "no checkpoint in" in broken.stderr and "can be restored" in broken.stderr


def test_branch_starts_from_a_checkpoint_of_another_run(shared_root, learns):
    # the trunk is the first test's run (its config, checkpoints at 10, 20 and 30): a run of
    # its own would only repeat that one's tokenized data, compile and start-up
    branch = run_cli(shared_root, *LEARNS, "--name", "twig", "--branch", f"{learns}@20")
    assert branch.returncode == 0, branch.stderr[-3000:]
    assert record(shared_root, "twig")["parent"] == f"{learns}@20"
    assert sorted(train_losses(shared_root, "twig")) == list(range(20, 30))
    # steps 21 to 30 replay the trunk's exactly: same state, same batches, same schedule
    trunk = train_losses(shared_root, learns)
    twig = train_losses(shared_root, "twig")
    assert all(twig[step] == trunk[step] for step in range(20, 30)), (twig, trunk)


def test_fresh_starts_over(shared_root):
    args = train(2)
    assert run_cli(shared_root, *args, "--name", "again").returncode == 0
    first = train_losses(shared_root, "again")
    assert run_cli(shared_root, *args, "--name", "again", "--fresh").returncode == 0
    assert train_losses(shared_root, "again") == first  # deterministic from scratch
    assert len((shared_root / "runs/again/metrics.jsonl").read_text().splitlines()) == 3


def test_batch_sizes_that_do_not_divide_are_refused(shared_root):
    result = run_cli(
        shared_root,
        "run",
        "gpt/train/pretrain",
        *TINY,
        "training.per_device_batch_size=3",
        "--name",
        "nodiv",
    )
    assert result.returncode == 2
    assert (
        "training.global_batch_size=4 is not a multiple of training.per_device_batch_size=3"
        in result.stderr
    )


def test_vocab_size_that_disagrees_with_the_tokenizer_is_refused(shared_root):
    result = run_cli(
        shared_root, "run", "gpt/train/pretrain", *TINY, "model.vocab_size=1000", "--name", "vocab"
    )
    assert result.returncode == 2
    assert "model.vocab_size=1000 disagrees with the tokenizer's vocabulary of 384" in result.stderr


NAN_PLUGIN = """
from dataclasses import dataclass
from theseus.core.components import Component, option
from theseus.core.hookspecs import hookimpl
from theseus.core.optim.configs import ScheduleBase


@dataclass
class NanAt(ScheduleBase):
    at: int = option(3, "the step whose learning rate is NaN")


def nan_at(config, peak_lr, total_steps):
    import jax.numpy as jnp
    return lambda step: jnp.where(step == config.at, jnp.nan, peak_lr)


@hookimpl
def theseus_register_schedules(register):
    register(Component("nan-at", NanAt, "nan_plugin:nan_at", "a NaN learning rate at one step"))
"""


@pytest.fixture
def nan_env(tmp_path, monkeypatch):
    from tests.core.plugin_factory import write_plugin

    site = tmp_path / "site"
    write_plugin(site, "nan-dist", "nan", "nan_plugin", NAN_PLUGIN)
    monkeypatch.setenv("PYTHONPATH", f"{site}:{__import__('os').environ.get('PYTHONPATH', '')}")


def test_non_finite_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(
    shared_root, nan_env
):
    args = train(
        8,
        "schedule.name=nan-at",
        "schedule.at=4",
        "checkpoint.every=2",
        "checkpoint.asynchronous=false",
    )
    result = run_cli(shared_root, *args, "--name", "nan")
    assert result.returncode == 2, result.stderr[-2000:]
    # the update of step 4 has a NaN learning rate, so the loss at step 5 is NaN
    assert "loss is nan at step 5 of run nan" in result.stderr
    kept = sorted(
        int(p.name) for p in (shared_root / "runs/nan/checkpoints").iterdir() if p.name.isdigit()
    )
    assert kept == [2, 4]

    skipping = run_cli(shared_root, *args, "training.skip_nonfinite=true", "--name", "nan-skip")
    assert skipping.returncode == 0, skipping.stderr[-2000:]
    rows = [r for r in metrics(shared_root, "nan-skip") if "train/loss" in r]
    assert all(math.isfinite(r["train/loss"]) for r in rows)
    # A skipped step leaves params and optimizer state untouched, the optimizer's own count
    # included, so the schedule's NaN step comes again: steps 5..8 are all skipped.
    assert rows[-1]["train/skipped"] == 4 and rows[3]["train/skipped"] == 0
    summary = json.loads((shared_root / "runs/nan-skip/summary.json").read_text())
    assert summary["skipped"] == 4 and math.isfinite(summary["val/loss"])


CSV_LOGGER = """
from dataclasses import dataclass
from pathlib import Path
from theseus.core.components import Component
from theseus.core.hookspecs import hookimpl


@dataclass
class NoOptions:
    pass


@hookimpl
def theseus_register_loggers(register):
    register(Component("csv", NoOptions, "csv_logger_impl:CSVLogger", "metrics as CSV"))
"""

CSV_LOGGER_IMPL = """
import os
from pathlib import Path
Path(os.environ["CSV_IMPORT_MARKER"]).write_text("imported")


class CSVLogger:
    def __init__(self, run_dir):
        self.out = (run_dir.path / "metrics.csv").open("w")

    def log(self, record):
        if "train/loss" in record:
            self.out.write(f"{record['step']},{record['train/loss']!r}\\n")

    def close(self):
        self.out.close()
"""


def test_a_plugin_logger_is_imported_only_when_enabled(shared_root, tmp_path, monkeypatch):
    import os

    from tests.core.plugin_factory import write_plugin

    site = tmp_path / "site"
    write_plugin(site, "csv-logger", "csv", "csv_logger", CSV_LOGGER)
    (site / "csv_logger_impl.py").write_text(CSV_LOGGER_IMPL)
    marker = tmp_path / "imported.txt"
    monkeypatch.setenv("PYTHONPATH", f"{site}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("CSV_IMPORT_MARKER", str(marker))
    assert run_cli(shared_root, *train(2), "--name", "no-csv").returncode == 0
    assert not marker.exists()
    assert run_cli(shared_root, *train(3), "logging.loggers=[csv]", "--name", "csv").returncode == 0
    assert marker.exists()
    rows = (shared_root / "runs/csv/metrics.csv").read_text().splitlines()
    losses = train_losses(shared_root, "csv")
    assert rows == [f"{step},{losses[step]!r}" for step in range(3)]


def test_an_unknown_or_missing_logger_is_a_clear_error(shared_root):
    unknown = run_cli(shared_root, *train(2), "logging.loggers=[tensorbored]", "--name", "tb1")
    assert (
        unknown.returncode == 2
        and "unknown logger 'tensorbored'; did you mean 'tensorboard'" in unknown.stderr
    )
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        missing = run_cli(shared_root, *train(2), "logging.loggers=[tensorboard]", "--name", "tb2")
        assert missing.returncode == 2 and "needs the tensorboardX package" in missing.stderr
