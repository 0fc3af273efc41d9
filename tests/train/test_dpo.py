"""Preference optimisation end to end: SFT on addition, then DPO on addition pairs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from theseus.core.inspect import open_step

from tests.train.conftest import TINY_MODEL, metrics, resumed_after_kill, run_cli, train_losses

SMALL = [
    *TINY_MODEL,
    "training.global_batch_size=16",
    "data.max_documents=200",
    "data.num_workers=1",
    "data.tokenizer=byte",
    "data.suffix=byte",
    "eval.batches=2",
    "logging.every=1",
    "logging.progress=false",
]
DPO = ["run", "gpt/train/dpo", *SMALL, "init.checkpoint=dpo-sft", "optimizer.learning_rate=0.002"]
LOG2 = float(np.float32(math.log(2)))  # -log sigmoid(0) in float32: policy == reference


@pytest.fixture(scope="module")
def sft(shared_root) -> str:
    args = ["run", "gpt/train/sft", *SMALL, "training.total_steps=60", "eval.every=0"]
    done = run_cli(shared_root, *args, "--name", "dpo-sft")
    assert done.returncode == 0, done.stderr[-3000:]
    return "dpo-sft"


@pytest.fixture(scope="module")
def full(shared_root, sft) -> str:
    args = [*DPO, "training.total_steps=40", "eval.every=10", "checkpoint.every=20"]
    done = run_cli(shared_root, *args, "--name", "dpo-full")
    assert done.returncode == 0, done.stderr[-3000:]
    return "dpo-full"


def test_full_fine_tuning_dpo_starts_at_log_2_and_learns_the_preference(shared_root, full):
    rows = metrics(shared_root, full)
    train = [r for r in rows if "train/loss" in r]
    # step 0: the policy is the reference (a frozen copy of the SFT weights): margin 0
    assert train[0]["train/loss"] == pytest.approx(LOG2, abs=1e-6)
    assert train[0]["train/rewards/margin"] == 0.0
    accuracy = [r["train/rewards/accuracy"] for r in train]
    first, last = np.mean(accuracy[:10]), np.mean(accuracy[-10:])
    val = [r["val/loss"] for r in rows if "val/loss" in r]
    val_accuracy = [r["val/rewards/accuracy"] for r in rows if "val/loss" in r]
    print(f"\nDPO reward accuracy {first:.3f} -> {last:.3f}; validation loss {val}")
    print(f"validation reward accuracy {val_accuracy}")
    assert all(0.0 <= a <= 1.0 for a in val_accuracy)  # every evaluation reports its own
    assert last > first + 0.05
    assert val[-1] < val[0] and val[-1] < LOG2 - 0.05
    assert train[-1]["train/rewards/margin"] > 0
    meta = json.loads(
        (shared_root / "runs" / full / "checkpoints" / "40" / "meta" / "metadata").read_text()
    )
    assert not [k for k in meta["arrays"] if k.startswith("state.frozen")]  # reference re-read


def test_time_travel_replays_the_logged_dpo_loss_bitwise(shared_root, full):
    """The replay runs the run's own objective (the DPO loss against its reference), not the
    next-token cross entropy of the same rows."""
    replayed = open_step(shared_root, full, 20).replay()
    assert replayed["loss"] == train_losses(shared_root, full)[20]


def test_a_killed_dpo_run_resumes_bit_exactly_reading_its_reference_again(shared_root, full):
    args = [*DPO, "training.total_steps=40", "eval.every=10", "checkpoint.every=20"]
    args.append("checkpoint.asynchronous=false")  # checkpoint 20 is whole before row 20
    resumed = resumed_after_kill(shared_root, "dpo-killed", args, steps=26)
    assert "resumed dpo-killed from step 20" in resumed
    assert train_losses(shared_root, "dpo-killed") == train_losses(shared_root, full)


def test_lora_dpo_uses_the_base_as_reference(shared_root, sft):
    args = [*DPO, "training.total_steps=6", "eval.every=0", "lora.rank=8", "--name", "dpo-lora"]
    done = run_cli(shared_root, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    train = [r for r in metrics(shared_root, "dpo-lora") if "train/loss" in r]
    # the adapters start at zero output: the policy is the base, the reference exactly
    assert train[0]["train/loss"] == pytest.approx(LOG2, abs=1e-6)
    assert any(r["train/rewards/margin"] != 0.0 for r in train[1:])  # the adapters train
    # merged, it is a DPO run at step 0 (its config keeps the dpo group; step zero is set
    # up with DPO's recipe)
    merged = run_cli(shared_root, "run", "lora/merge", "merge.run=dpo-lora", "--name", "dpo-merged")
    assert merged.returncode == 0, merged.stderr[-3000:]
    folder = shared_root / "runs" / "dpo-merged"
    assert json.loads((folder / "job.json").read_text())["key"] == "gpt/train/dpo"
    assert "dpo:" in (folder / "config.yaml").read_text().splitlines()


def test_simpo_needs_no_reference_and_an_odd_batch_is_refused(shared_root, sft):
    args = [*DPO, "training.total_steps=3", "eval.every=0", "dpo.loss=simpo", "dpo.beta=2.0"]
    done = run_cli(shared_root, *args, "--name", "dpo-simpo")
    assert done.returncode == 0, done.stderr[-3000:]
    train = [r for r in metrics(shared_root, "dpo-simpo") if "train/loss" in r]
    assert len(train) == 3 and all(math.isfinite(r["train/loss"]) for r in train)
    odd_args = [a for a in DPO if not a.startswith("training.global_batch_size=")]
    odd = run_cli(shared_root, *odd_args, "training.global_batch_size=7", "--name", "dpo-odd")
    assert odd.returncode == 2
    assert (
        odd.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: training.global_batch_size=7: preference training counts rows, two per pair"
        )
    )
