"""Damaged tokenized data is refused in one line naming the file, exit 2, before any step.

Before: a shard with flipped bytes and its mtime restored passed (the check trusted size and
mtime stamps in ``.verified.json``) and trained; token ids >= the vocabulary surfaced as
"loss is nan at step 0 ... set training.skip_nonfinite=true"; a truncated ``metadata.json``
ended in a 110-line JSONDecodeError traceback, exit 1.

Every test damages a copy of the shared corpus (``shared_root`` is never written), and checks
that the dataset is left byte-identical and that no run trained on the damaged data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from theseus.core.data.api import find_dataset

from tests.train.conftest import TINY, run_cli

BASE = ["run", "gpt/train/pretrain", *TINY, "eval.every=0", "logging.peak_flops=1e12"]
VERIFIED = "verified-data.json"
STRETCH = "training.schedule_on_resume=stretch"  # a longer resume re-plans the lr schedule


def train(root: Path, name: str, steps: int, *extra: str):
    return run_cli(root, *BASE, f"training.total_steps={steps}", *extra, "--name", name)


@pytest.fixture(scope="module")
def corpus(shared_root) -> Path:
    """``shared_root`` with the TINY corpus tokenized (by its own tokenize job, once)."""
    from theseus.core.data.api import tokenize_prerequisites
    from theseus.core.data.config import DataConfig

    data = DataConfig(max_documents=24, vocab_size=384, num_workers=1)
    for prerequisite in tokenize_prerequisites(data, shared_root):
        record = shared_root / "runs" / prerequisite.name / "job.json"
        if record.exists() and json.loads(record.read_text())["status"] == "finished":
            continue
        done = run_cli(
            shared_root, "run", prerequisite.key, *prerequisite.overrides,
            "--name", prerequisite.name,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    return shared_root


@pytest.fixture
def root(corpus, tmp_path) -> Path:
    """A root of this test's own: a copy of the corpus and its finished tokenize run."""
    out = tmp_path / "root"
    source = find_dataset(corpus, "python-stdlib")
    shutil.copytree(source, out / source.relative_to(corpus))
    for run in (corpus / "runs").glob("data-tokenize-python-stdlib-*"):
        shutil.copytree(run, out / "runs" / run.name)
    return out


def dataset(root: Path) -> Path:
    return find_dataset(root, "python-stdlib")


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def flip_bits(shard: Path, offsets: range) -> None:
    """XOR the lowest bit of the low byte of some tokens (every id stays < 384, an even
    number), then give the file back its mtime: only a hash can tell."""
    stat = shard.stat()
    raw = bytearray(shard.read_bytes())
    for offset in offsets:
        raw[offset] ^= 0x01
    shard.write_bytes(bytes(raw))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert shard.stat().st_mtime_ns == stat.st_mtime_ns and shard.stat().st_size == len(raw)


def last_line(done) -> str:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def nothing_trained(root: Path, name: str) -> None:
    run = root / "runs" / name
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()


def test_verify_takes_full_or_size_and_refuses_others_at_config_time(tmp_path):
    done = run_cli(tmp_path, *BASE, "data.verify=mtime")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: data.verify='mtime': expected one of full, size"
    ]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_flipped_bytes_with_their_mtime_kept_are_refused_but_size_mode_trusts_them(root):
    from theseus.core.data.reader import TokenizedDataset

    TokenizedDataset(dataset(root))  # opened (and verified) once before the damage
    shard = dataset(root) / "train-00000.bin"
    flip_bits(shard, range(1000, 9000, 64))
    before = snapshot(dataset(root))

    refused = train(root, "flipped", 2)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert last_line(refused) == (
        f"error: {shard} does not match its sha256 checksum: corrupted; delete the "
        "directory and tokenize again"
    )
    nothing_trained(root, "flipped")
    assert snapshot(dataset(root)) == before  # no stamp file or anything else written

    # data.verify=size checks sizes only: the same bytes pass (every id is in range)
    sized = train(root, "sized", 2, "data.verify=size")
    assert sized.returncode == 0, sized.stderr[-2000:]
    assert not (root / "runs" / "sized" / VERIFIED).exists()  # nothing hashed, nothing kept
    assert snapshot(dataset(root)) == before


def test_a_truncated_shard_is_refused_under_size_too_before_the_run_is_touched(root):
    assert train(root, "trunk", 2).returncode == 0
    run = root / "runs" / "trunk"
    kept = snapshot(run)
    shard = dataset(root) / "validation-00000.bin"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-2])
    before = snapshot(dataset(root))
    for mode in ("size", "full"):
        for name in ("trunk", "other"):  # a resume, and a new run
            done = train(root, name, 3, f"data.verify={mode}", STRETCH)
            assert done.returncode == 2, done.stderr[-2000:]
            assert last_line(done) == (
                f"error: {shard} has {size - 2} bytes, expected {size}: truncated or "
                "corrupted; delete the directory and tokenize again"
            )
    assert snapshot(run) == kept  # refused before the runner wrote a byte
    assert not (root / "runs" / "other").exists()
    assert snapshot(dataset(root)) == before


def test_a_run_hashes_once_and_its_resume_checks_sizes_while_a_new_run_hashes_again(root):
    first = train(root, "once", 2)
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"verified {dataset(root)}: " in first.stderr  # the hash's log line
    record = root / "runs" / "once" / VERIFIED
    kept = json.loads(record.read_text())
    digest = hashlib.sha256((dataset(root) / "metadata.json").read_bytes()).hexdigest()
    assert kept[str(dataset(root))]["metadata_sha256"] == digest
    assert kept[str(dataset(root))]["max_token_id"]["train-00000.bin"] < 384

    # damage the data after the run verified it: bits flipped, sizes and mtimes unchanged
    shard = dataset(root) / "train-00000.bin"
    flip_bits(shard, range(1001, 9001, 64))
    before = snapshot(dataset(root))
    resumed = train(root, "once", 3, STRETCH)  # the same metadata: hashed by this run: sizes only
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"verified {dataset(root)}: " not in resumed.stderr
    assert json.loads(record.read_text()) == kept
    assert json.loads((root / "runs" / "once" / "job.json").read_text())["status"] == "finished"

    fresh = train(root, "again", 2)  # a new run hashes every file again
    assert fresh.returncode == 2, fresh.stderr[-2000:]
    assert last_line(fresh).startswith(f"error: {shard} does not match its sha256 checksum")
    nothing_trained(root, "again")
    assert snapshot(dataset(root)) == before


def test_token_ids_beyond_the_vocabulary_are_named_before_any_step(root):
    directory = dataset(root)
    shard = directory / "train-00000.bin"
    tokens = np.fromfile(shard, np.uint16)
    tokens[::97] = 9000
    tokens.tofile(shard)
    metadata = json.loads((directory / "metadata.json").read_text())
    entry = metadata["files"]["train-00000.bin"]
    entry["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()  # the checksum passes
    assert entry["bytes"] == shard.stat().st_size
    (directory / "metadata.json").write_text(json.dumps(metadata, indent=2))
    before = snapshot(directory)

    done = train(root, "ids", 2)
    assert done.returncode == 2, done.stderr[-2000:]
    assert last_line(done) == (
        f"error: {shard} holds token id 9000 >= the vocabulary size 384: the data was "
        "tokenized with another tokenizer, or is corrupted; delete the directory and "
        "tokenize again"
    )
    assert "loss is nan" not in done.stderr
    nothing_trained(root, "ids")
    assert f"verified {directory}: " in done.stderr
    again = train(root, "ids", 2)  # its record keeps the largest id: refused without a hash
    assert again.returncode == 2 and "holds token id 9000 >=" in last_line(again)
    assert f"verified {directory}: " not in again.stderr
    nothing_trained(root, "ids")
    assert snapshot(directory) == before


def test_a_truncated_metadata_json_is_one_line_and_the_run_is_left_alone(root):
    assert train(root, "meta", 2).returncode == 0
    run = root / "runs" / "meta"
    kept = snapshot(run)
    metadata = dataset(root) / "metadata.json"
    metadata.write_bytes(metadata.read_bytes()[:500])
    before = snapshot(dataset(root))
    for name in ("meta", "new"):  # a resume, and a new run
        done = train(root, name, 3, STRETCH)
        assert done.returncode == 2, done.stderr[-2000:]
        line = last_line(done)
        assert line.startswith(f"error: {metadata} is not valid JSON (")
        assert line.endswith(f"truncated or corrupted; delete {dataset(root)} and tokenize again")
    assert snapshot(run) == kept
    assert not (root / "runs" / "new").exists()
    assert snapshot(dataset(root)) == before
