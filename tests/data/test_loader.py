"""The Grain loader the trainer consumes: pure in (seed, step), host slices, masking."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from datatest_helpers import data_config
from theseus.core.data import (
    ChecksumError,
    DataError,
    DataIncompleteError,
    DataMissingError,
    open_training_data,
)
from theseus.core.data.api import find_dataset
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.errors import ConfigError
from theseus.data import load_tokenizer

KEYS = {"inputs", "targets", "positions", "segment_ids", "loss_mask"}


def open_data(root, data, **kw):
    args = {"seq_len": 64, "batch": 8, "seed": 3, **kw}
    return open_training_data(root, data, **args)


def assert_same(a, b):
    assert a.keys() == b.keys() == KEYS
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_batch_shapes_and_dtypes(stdlib_root, stdlib_data):
    data = open_data(stdlib_root, stdlib_data)
    batch = data.batch(0)
    for key in ("inputs", "targets", "positions", "segment_ids"):
        assert batch[key].shape == (8, 64) and batch[key].dtype == np.int32
    assert batch["loss_mask"].dtype == np.float32
    assert data.vocab_size == 512 and data.eos_id == 0
    np.testing.assert_array_equal(batch["targets"][:, :-1], batch["inputs"][:, 1:])
    tokenizer = load_tokenizer(data.tokenizer_dir)
    assert tokenizer.vocab_size == 512 and len(tokenizer.decode(batch["inputs"][0])) > 64


def test_batch_is_a_pure_function_of_seed_and_step(stdlib_root, stdlib_data):
    first = open_data(stdlib_root, stdlib_data)
    second = open_data(stdlib_root, stdlib_data)
    assert_same(first.batch(7), second.batch(7))
    for _ in range(3):
        first.batch(1)  # history does not matter
    assert_same(first.batch(7), second.batch(7))
    iterator = second.iterator(start_step=5)
    for step in (5, 6, 7):
        assert_same(next(iterator), first.batch(step))
    assert not np.array_equal(first.batch(0)["inputs"], first.batch(1)["inputs"])
    other_seed = open_data(stdlib_root, stdlib_data, seed=4)
    assert not np.array_equal(other_seed.batch(7)["inputs"], first.batch(7)["inputs"])


def test_epochs_visit_every_window_once(stdlib_root, stdlib_data):
    data = open_data(stdlib_root, stdlib_data, seq_len=512, batch=4)
    stream, sampler = data._train[0], data._samplers[0]
    windows = stream.known()
    first = sampler(np.arange(windows), stream).tolist()
    second = sampler(np.arange(windows, 2 * windows), stream).tolist()
    assert sorted(first) == sorted(second) == list(range(windows)) and windows >= 8
    assert first != second  # reshuffled every epoch


@pytest.mark.parametrize("hosts", [2, 4])
def test_host_slices_concatenate_to_the_global_batch(stdlib_root, stdlib_data, hosts):
    whole = open_data(stdlib_root, stdlib_data).batch(11)
    parts = [
        open_data(
            stdlib_root, stdlib_data, process_index=i, batch=BatchPlan.of(8, processes=hosts)
        ).batch(11)
        for i in range(hosts)
    ]
    assert_same(whole, {k: np.concatenate([p[k] for p in parts]) for k in KEYS})


def test_document_masking_segments_and_positions(stdlib_root, stdlib_data):
    data = open_data(stdlib_root, stdlib_data, seq_len=1024)
    eos = data.eos_id
    boundaries = 0
    for step in range(30):
        b = data.batch(step)
        inputs, seg, pos, loss = b["inputs"], b["segment_ids"], b["positions"], b["loss_mask"]
        assert (seg[:, 0] == 1).all() and (pos[:, 0] == 0).all()
        starts = np.zeros_like(inputs, dtype=bool)
        starts[:, 1:] = inputs[:, :-1] == eos  # a document starts after each EOS
        boundaries += int(starts.sum())
        np.testing.assert_array_equal(np.diff(seg, axis=1), starts[:, 1:].astype(np.int32))
        assert (pos[starts] == 0).all()
        inside = ~starts[:, 1:]
        assert (np.diff(pos, axis=1)[inside] == 1).all()
        np.testing.assert_array_equal(loss == 0, inputs == eos)  # no loss across documents
    assert boundaries > 0
    plain = open_data(
        stdlib_root,
        dataclasses.replace(stdlib_data, document_masking=False),
        seq_len=1024,
    ).batch(0)
    assert (plain["segment_ids"] == 1).all() and (plain["loss_mask"] == 1).all()
    assert (plain["positions"] == np.arange(1024)).all()


def test_validation_stream_is_fixed_and_separate(stdlib_root, stdlib_data):
    data = open_data(stdlib_root, stdlib_data)
    first, again = data.validation_batches(3), data.validation_batches(3)
    for a, b in zip(first, again, strict=True):
        assert_same(a, b)
    train = {data.batch(s)["inputs"][r, :16].tobytes() for s in range(20) for r in range(8)}
    assert not any(v["inputs"][r, :16].tobytes() in train for v in first for r in range(8))


def test_missing_dataset_names_the_job_to_run(tmp_path, stdlib_data):
    with pytest.raises(DataMissingError, match="theseus run data/tokenize/python-stdlib"):
        open_data(tmp_path, stdlib_data)


def copied_dataset(root: Path, into: Path) -> Path:
    """The tokenized python-stdlib dataset of ``root`` copied to the same place under ``into``."""
    source = find_dataset(root, "python-stdlib")
    copy = into / source.relative_to(root)
    shutil.copytree(source, copy)
    return copy


def test_incomplete_dataset_is_refused(tmp_path, stdlib_root, stdlib_data):
    copy = copied_dataset(stdlib_root, tmp_path)
    (copy / "metadata.json").unlink()
    with pytest.raises(DataIncompleteError, match="incomplete"):
        open_data(tmp_path, stdlib_data)


def test_corrupted_and_truncated_shards_are_named(tmp_path, stdlib_root, stdlib_data):
    copy = copied_dataset(stdlib_root, tmp_path)
    open_data(tmp_path, stdlib_data)  # verifies (no run: nothing is remembered)
    assert not (copy / ".verified.json").exists()  # no size + mtime stamps to trust
    shard = copy / "train-00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=f"{shard} does not match its sha256"):
        open_data(tmp_path, stdlib_data)
    shard.write_bytes(bytes(raw[:-10]))
    with pytest.raises(ChecksumError, match=f"{shard} has {len(raw) - 10} bytes, expected"):
        open_data(tmp_path, stdlib_data)


def test_another_tokenizer_reads_its_own_folder(stdlib_root):
    """The BPE data is never read for a byte tokenizer: that one has a folder of its own."""
    data = data_config(tokenizer="byte", max_documents=40, validation_fraction=0.1)
    with pytest.raises(DataMissingError, match=r"python-stdlib/byte-[0-9a-f]{10}: run") as error:
        open_data(stdlib_root, data)
    assert "tokenizer.name=byte" in str(error.value) and "bpe" not in str(error.value)


def test_batch_size_must_divide_among_hosts():
    with pytest.raises(DataError, match="global batch size 8 is not divisible by the 3"):
        BatchPlan.of(8, processes=3)


def test_sequence_longer_than_the_data(stdlib_root, stdlib_data):
    with pytest.raises(DataError, match="not one row of seq_len 10000000"):
        open_data(stdlib_root, stdlib_data, seq_len=10_000_000)


def test_weighted_mixture(stdlib_root, mixture_root):
    data = open_data(stdlib_root, mixture_root, seq_len=32, batch=16)
    user = load_tokenizer(data.tokenizer_dir).special_id("<|user|>")
    rows = np.concatenate([data.batch(s)["inputs"] for s in range(25)])
    from_addition = (rows == user).any(axis=1).mean()
    assert 0.15 < from_addition < 0.35  # weight 1 of 4
    again = open_data(stdlib_root, mixture_root, seq_len=32, batch=16)
    assert_same(again.batch(3), data.batch(3))


def addition_config(stdlib_root, **values):
    """The addition set as the mixture tokenized it: the stdlib BPE, the same split."""
    shared = find_dataset(stdlib_root, "python-stdlib") / "tokenizer" / "tokenizer.json"
    return data_config(
        dataset="addition",
        tokenizer="hf",
        tokenizer_options={"path": str(shared)},
        validation_fraction=0.1,
        **values,
    )


def test_padded_chat_rows_learn_only_the_answer(stdlib_root, mixture_root):
    data_cfg = addition_config(stdlib_root, max_documents=40)
    for side in ("right", "left"):
        data_cfg.padding_side = side
        data = open_data(stdlib_root, data_cfg, layout="padded", seq_len=48)
        tokenizer = load_tokenizer(data.tokenizer_dir)
        batch = data.batch(0)
        for row in range(8):
            real = batch["segment_ids"][row] == 1
            assert (batch["inputs"][row][~real] == data.pad_id).all()
            assert real[-1 if side == "left" else 0]
            assert batch["positions"][row][real].tolist() == list(range(int(real.sum())))
            learned = tokenizer.decode(batch["targets"][row][batch["loss_mask"][row] == 1])
            prompt = tokenizer.decode(batch["inputs"][row][real])
            a, b = prompt.split("What is ")[1].split("?")[0].split("+")
            assert learned == f"{int(a) + int(b)}<|end|>"


def test_loss_on_all_tokens_of_chat_data(stdlib_root, mixture_root):
    config = addition_config(stdlib_root, loss_on="all")
    batch = open_data(stdlib_root, config, layout="padded", seq_len=48).batch(0)
    np.testing.assert_array_equal(batch["loss_mask"], batch["segment_ids"].astype(np.float32))
    with pytest.raises(ConfigError, match="data.loss_on='some': expected one of assistant, all"):
        open_data(stdlib_root, addition_config(stdlib_root, loss_on="some"))
