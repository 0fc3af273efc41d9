"""SFT: padded chat rows with a loss mask, from scratch or from another run's weights."""

from __future__ import annotations

import numpy as np
import pytest
from theseus.core.inspect import open_step

from tests.train.conftest import TINY_MODEL, final_params, metrics, run_cli, train_losses


@pytest.fixture(scope="module")
def sft_root(tmp_path_factory):
    """A root of its own: other modules tokenize the same datasets with other settings."""
    return tmp_path_factory.mktemp("sft-root")


SMALL = [
    *TINY_MODEL,
    "training.global_batch_size=8",
    "logging.every=1",
    "logging.progress=false",
    "eval.every=0",
    "eval.batches=2",
    "data.num_workers=1",
]


def sft_one_still_step(root, init: str, name: str) -> None:
    """Run ``name``: one SFT step from ``init`` (byte tokens) with a zero learning rate, which
    leaves the weights where init put them."""
    sft = run_cli(
        root, "run", "gpt/train/sft", *SMALL, "data.tokenizer=byte", "data.suffix=byte",
        "training.total_steps=1", "optimizer.learning_rate=0", init, "--name", name,
    )  # fmt: skip
    assert sft.returncode == 0, sft.stderr[-3000:]


def test_sft_on_addition_learns_the_format(sft_root):
    result = run_cli(
        sft_root,
        "run",
        "gpt/train/sft",
        *SMALL,
        "data.vocab_size=300",
        "training.total_steps=40",
        "optimizer.learning_rate=3e-3",
        "checkpoint.every=20",
        "--name",
        "sft",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    losses = train_losses(sft_root, "sft")
    # the assistant turns are digits and a few symbols: far below ln(300) = 5.7 once learned
    assert losses[0] > 5.0 and np.mean([losses[s] for s in range(35, 40)]) < 3.5
    assert metrics(sft_root, "sft")[-1]["val/loss"] < 3.5
    # time travel replays step 20 on its padded chat rows, loss mask included
    assert open_step(sft_root, "sft", 20).replay()["loss"] == losses[20]


def test_sft_starts_from_the_weights_of_a_pretraining_run(sft_root):
    byte = ["data.tokenizer=byte", "data.max_documents=8"]
    pre = run_cli(
        sft_root,
        "run",
        "gpt/train/pretrain",
        *SMALL,
        *byte,
        "training.total_steps=3",
        "--name",
        "pre-byte",
    )
    assert pre.returncode == 0, pre.stderr[-3000:]
    # one SFT step with a zero learning rate leaves the weights where init put them
    sft_one_still_step(sft_root, "init.checkpoint=pre-byte", "sft-from-pre")
    before, after = final_params(sft_root, "pre-byte"), final_params(sft_root, "sft-from-pre")
    assert before.keys() == after.keys()
    for key in before:
        assert np.array_equal(before[key], after[key]), key
    assert sorted(train_losses(sft_root, "sft-from-pre")) == [0]  # weights only: step 0


def test_init_from_a_missing_run_is_an_error(sft_root):
    result = run_cli(
        sft_root,
        "run",
        "gpt/train/sft",
        *SMALL,
        "data.tokenizer=byte",
        "data.suffix=byte",
        "init.checkpoint=nowhere",
        "--name",
        "sft-bad",
    )
    assert result.returncode == 2
    assert "init.checkpoint: run 'nowhere' has no checkpoints" in result.stderr
    assert "running prerequisite" not in result.stderr  # refused before any work


def test_sft_starts_from_hugging_face_weights(sft_root, tmp_path):
    transformers = pytest.importorskip("transformers", reason="needs the parity group")
    import torch
    from flax import nnx
    from theseus.data.tokenizers.byte import ByteTokenizer
    from theseus.models.hf import load_hf

    vocab = ByteTokenizer().vocab_size
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
    )
    hf_dir = tmp_path / "hf-gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(hf_dir)
    sft_one_still_step(sft_root, f"init.hf={hf_dir}", "sft-from-hf")
    _, hf_params, _ = nnx.split(load_hf(hf_dir), nnx.Param, ...)
    expected = {key: np.asarray(v) for key, v in _flat(hf_params).items()}
    got = final_params(sft_root, "sft-from-hf")
    assert len(got) == len(expected)
    assert sorted(np.asarray(v).tobytes() for v in got.values()) == sorted(
        v.tobytes() for v in expected.values()
    )

    wrong = run_cli(
        sft_root,
        "run",
        "gpt/train/sft",
        *SMALL,
        "model.d_ff=128",
        "data.tokenizer=byte",
        "data.suffix=byte",
        f"init.hf={hf_dir}",
        "--name",
        "sft-hf-wrong",
    )
    assert wrong.returncode == 2, wrong.stderr[-2000:]
    # config.json leaves n_inner unset: d_ff = 4 * 64 = 256; refused before any work
    assert "init.hf: model.d_ff=128 contradicts d_ff=256" in wrong.stderr
    assert "running prerequisite" not in wrong.stderr


def _flat(tree):
    import jax

    return {
        jax.tree_util.keystr(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }
