"""SFT: padded chat rows with a loss mask, from scratch or from another run's weights."""

from __future__ import annotations

import numpy as np

from tests.train.conftest import final_params, metrics, run_cli, train_losses

SMALL = [
    "model.n_layers=2", "model.d_model=64", "model.n_heads=2", "model.max_seq_len=64",
    "training.seq_len=32", "training.global_batch_size=8", "logging.every=1",
    "logging.progress=false", "eval.every=0", "eval.batches=2", "data.num_workers=1",
]


def test_sft_on_addition_learns_the_format(shared_root):
    result = run_cli(shared_root, "run", "gpt/train/sft", *SMALL, "data.vocab_size=300",
                     "training.total_steps=40", "optimizer.learning_rate=3e-3", "--name", "sft")
    assert result.returncode == 0, result.stderr[-3000:]
    losses = train_losses(shared_root, "sft")
    # the assistant turns are digits and a few symbols: far below ln(300) = 5.7 once learned
    assert losses[0] > 5.0 and np.mean([losses[s] for s in range(35, 40)]) < 3.5
    assert metrics(shared_root, "sft")[-1]["val/loss"] < 3.5


def test_sft_starts_from_the_weights_of_a_pretraining_run(shared_root):
    byte = ["data.tokenizer=byte", "data.max_documents=8"]
    pre = run_cli(shared_root, "run", "gpt/train/pretrain", *SMALL, *byte, "training.total_steps=3",
                  "--name", "pre-byte")
    assert pre.returncode == 0, pre.stderr[-3000:]
    # one SFT step with a zero learning rate leaves the weights where init put them
    sft = run_cli(shared_root, "run", "gpt/train/sft", *SMALL, "data.tokenizer=byte", "data.suffix=byte",
                  "training.total_steps=1", "optimizer.learning_rate=0", "init.checkpoint=pre-byte",
                  "--name", "sft-from-pre")
    assert sft.returncode == 0, sft.stderr[-3000:]
    before, after = final_params(shared_root, "pre-byte"), final_params(shared_root, "sft-from-pre")
    assert before.keys() == after.keys()
    for key in before:
        assert np.array_equal(before[key], after[key]), key
    assert sorted(train_losses(shared_root, "sft-from-pre")) == [0]  # weights only: step 0


def test_init_from_a_missing_run_is_an_error(shared_root):
    result = run_cli(shared_root, "run", "gpt/train/sft", *SMALL, "data.tokenizer=byte",
                     "data.suffix=byte", "init.checkpoint=nowhere", "--name", "sft-bad")
    assert result.returncode == 2
    assert "init.checkpoint: run 'nowhere' has no checkpoints" in result.stderr
    assert "running prerequisite" not in result.stderr  # refused before any work
