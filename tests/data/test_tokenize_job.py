"""The data/tokenize jobs: parallel, byte-identical, resumable after SIGKILL, strict."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datatest_helpers import STDLIB_SMALL, checksums, data_config, tokenize
from theseus.core.data import DataError, SettingsConflictError, TokenizedDataset
from theseus.core.data.api import find_dataset, open_training_data
from theseus.core.plugins import registries
from theseus.data.tokenize.units import finished_units

REPO = Path(__file__).resolve().parents[2]


def test_every_dataset_gets_a_tokenize_job():
    regs = registries()
    for name in regs.datasets.names():
        assert f"data/tokenize/{name}" in regs.jobs
    assert "data/tokenize/python-stdlib" in regs.jobs


def test_one_and_two_workers_write_identical_bytes(tmp_path, stdlib_root):
    common = [*STDLIB_SMALL, "tokenizer.vocab_size=512", "data.validation_fraction=0.1"]
    tokenize(tmp_path, "python-stdlib", *common, "data.num_workers=1")
    one = checksums(find_dataset(tmp_path, "python-stdlib"))
    two = checksums(find_dataset(stdlib_root, "python-stdlib"))  # made with 2 workers
    assert one == two
    assert {"train-00000.bin", "validation-00000.bin", "tokenizer/tokenizer.json"} <= set(one)


def test_output_layout_and_metadata(stdlib_root):
    directory = find_dataset(stdlib_root, "python-stdlib")
    meta = json.loads((directory / "metadata.json").read_text())
    assert meta["format_version"] == 2
    assert meta["token_dtype"] == "uint16"
    assert meta["tokenizer"]["name"] == "bpe" and meta["tokenizer"]["vocab_size"] == 512
    assert meta["documents"] == 40
    splits = meta["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 40
    assert splits["validation"]["documents"] >= 1
    assert splits["train"]["tokens"] + splits["validation"]["tokens"] == meta["tokens"]
    dataset = TokenizedDataset(directory)
    shard = dataset.splits["train"][0]
    eos = dataset.eos_id
    ends = np.append(shard.doc_starts[1:], shard.num_tokens) - 1
    assert (np.asarray(shard.tokens)[ends] == eos).all()  # each document ends with EOS
    assert int((np.asarray(shard.tokens) == eos).sum()) == len(shard.doc_starts)
    assert not (directory / ".work").exists()


def own_copy(stdlib_root: Path, tmp_path: Path) -> Path:
    """A root of the test's own holding the session's tokenized corpus."""
    shutil.copytree(stdlib_root / "data", tmp_path / "data")
    return tmp_path


def test_complete_output_is_reused_and_another_tokenizer_gets_its_own_folder(
    stdlib_root, tmp_path, caplog
):
    root = own_copy(stdlib_root, tmp_path)
    common = [*STDLIB_SMALL, "tokenizer.vocab_size=512", "data.validation_fraction=0.1"]
    bpe = find_dataset(root, "python-stdlib")
    before = checksums(bpe)
    with caplog.at_level("INFO"):
        tokenize(root, "python-stdlib", *common, name="again")
    assert "complete with the same settings: reusing it" in caplog.text
    meta = tokenize(root, "python-stdlib", *common[:-2], "tokenizer.name=byte", name="b")
    variants = sorted(p.name for p in bpe.parent.iterdir() if not p.name.startswith("."))
    assert len(variants) == 2 and variants[0].startswith("bpe512-")
    assert variants[1].startswith("byte-") and meta["tokenizer"]["kind"] == "byte"
    assert checksums(bpe) == before  # the BPE tokenization is untouched


def test_a_folder_holding_other_settings_is_refused(tmp_path, stdlib_root):
    source = find_dataset(stdlib_root, "python-stdlib")
    common = [*STDLIB_SMALL, "tokenizer.vocab_size=512", "data.validation_fraction=0.2"]
    from theseus.core.runner import config_for, job_spec
    from theseus.data.tokenize.identity import identity_settings, output_dir

    regs = registries()
    config = config_for(job_spec("data/tokenize/python-stdlib", regs), regs, common).to_object()
    settings = identity_settings("python-stdlib", config.data, config.tokenizer)
    forged = output_dir(tmp_path, "python-stdlib", settings, "")
    shutil.copytree(source, forged)  # data made with fraction 0.1 under the 0.2 folder
    with pytest.raises(SettingsConflictError) as error:
        tokenize(tmp_path, "python-stdlib", *common)
    message = str(error.value)
    assert str(forged) in message and "data.validation_fraction: 0.1 -> 0.2" in message


def test_suffix_labels_a_copy_of_its_own(stdlib_root, tmp_path):
    root = own_copy(stdlib_root, tmp_path)
    tokenize(
        root,
        "python-stdlib",
        "data.max_documents=3",
        "tokenizer.name=byte",
        "data.suffix=bytes",
        name="bytes",
    )
    parent = root / "data" / "python-stdlib"
    labelled = [p for p in parent.iterdir() if p.name.endswith("-bytes")]
    assert len(labelled) == 1 and labelled[0].name.startswith("byte-")
    meta = json.loads((labelled[0] / "metadata.json").read_text())
    assert meta["tokenizer"]["kind"] == "byte" and meta["documents"] == 3


def test_empty_corpus_is_an_error_that_leaves_nothing_behind(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="'text-files' produced no documents"):
        tokenize(tmp_path, "text-files", f"data.files={empty}", "tokenizer.name=byte")
    with pytest.raises(DataError, match="matches no file"):
        tokenize(tmp_path, "text-files", f"data.files={tmp_path}/nope*.txt", "tokenizer.name=byte")
    written = (tmp_path / "data" / "text-files").glob("[!.]*")
    assert not list(written)  # no dataset folder (the locks stay, as everywhere)
    empty.write_text('{"text": "now there is a document"}\n')
    meta = tokenize(tmp_path, "text-files", f"data.files={empty}", "tokenizer.name=byte")
    assert meta["documents"] == 1


def test_fineweb_from_local_shards_with_tiktoken(tmp_path):
    shards = tmp_path / "fw"
    shards.mkdir()
    for i in range(2):
        texts = [f"Document {i}-{j}: the quick brown fox jumps." * (j + 1) for j in range(10)]
        pq.write_table(
            pa.table({"text": texts, "id": [str(j) for j in range(10)]}),
            shards / f"{i:03d}_00000.parquet",
        )
    meta = tokenize(
        tmp_path,
        "fineweb",
        f"data.files={shards}/*.parquet",
        "tokenizer.name=tiktoken",
        "data.num_workers=1",
    )
    assert meta["documents"] == 20
    assert meta["token_dtype"] == "uint32"  # 100k vocabulary does not fit 16 bits
    dataset = TokenizedDataset(find_dataset(tmp_path, "fineweb"))
    assert dataset.vocab_size == 100277


def test_chat_data_stores_a_loss_mask_on_assistant_turns(tmp_path):
    tokenize(
        tmp_path, "addition", "data.num_examples=30", "tokenizer.name=byte", "data.num_workers=1"
    )
    dataset = TokenizedDataset(find_dataset(tmp_path, "addition"))
    assert dataset.has_mask
    from theseus.data import load_tokenizer

    tok = load_tokenizer(dataset.tokenizer_dir)
    tokens, mask = dataset.splits["train"][0].document(0)
    text = tok.decode(tokens)
    assert re.fullmatch(
        r"<\|user\|>What is \d+\+\d+\?<\|end\|><\|assistant\|>\d+<\|end\|><\|endoftext\|>", text
    )
    learned = tok.decode(np.asarray(tokens)[np.asarray(mask) == 1])
    answer = text.split("<|assistant|>")[1].split("<|end|>")[0]
    assert learned == answer + "<|end|>"


def _theseus(*args: str, root: Path) -> subprocess.Popen:
    env = {**os.environ, "THESEUS_ROOT": str(root)}
    return subprocess.Popen(
        [sys.executable, "-m", "theseus.cli.main", "run", *args],
        env=env,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_resume_after_sigkill_is_byte_identical(tmp_path):
    args = [
        "data/tokenize/python-stdlib",
        "data.max_documents=500",  # about 120 units: the kill lands with most still to do
        "data.unit_bytes=40000",
        "tokenizer.name=byte",
        "data.validation_fraction=0.05",
    ]
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    works = (killed_root / "data" / "python-stdlib").glob("*/.work")
    process = _theseus(*args, "data.num_workers=2", root=killed_root)
    deadline = time.time() + 120
    while not (work := next(iter(works), None)) or len(finished_units(work)) < 3:
        works = (killed_root / "data" / "python-stdlib").glob("*/.work")
        assert process.poll() is None, process.stdout.read()
        assert time.time() < deadline
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(finished_units(work))
    assert not (find_dataset(killed_root, "python-stdlib") / "metadata.json").exists()

    rerun = _theseus(*args, "data.num_workers=2", root=killed_root)
    output, _ = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, output
    assert f"resuming: {done_before} of" in output
    summary = re.search(
        r"(\d+) units tokenized now by (\d+) worker processes, (\d+) by an earlier run", output
    )
    assert summary, output
    now, workers, earlier = map(int, summary.groups())
    assert earlier == done_before, output
    assert now > 0, "the kill landed after every unit was written: nothing was resumed"
    assert workers == 2  # the remaining units really were split across processes
    clean = _theseus(*args, "data.num_workers=1", root=clean_root)
    output, _ = clean.communicate(timeout=300)
    assert clean.returncode == 0, output
    assert checksums(find_dataset(killed_root, "python-stdlib")) == checksums(
        find_dataset(clean_root, "python-stdlib")
    )


def test_skipped_bad_records_are_counted(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one"}\n{"txt": "bad"}\nnot json\n{"text": "two"}\n')
    with pytest.raises(DataError, match=re.escape(f"{path}:2: no string field 'text'")):
        tokenize(tmp_path, "text-files", f"data.files={path}", "tokenizer.name=byte")
    meta = tokenize(
        tmp_path / "again",
        "text-files",
        f"data.files={path}",
        "tokenizer.name=byte",
        "data.skip_bad_records=true",
        "data.num_workers=1",
    )
    assert meta["documents"] == 2 and meta["skipped_records"] == 2


def test_small_shards_cut_at_document_boundaries(tmp_path):
    meta = tokenize(
        tmp_path,
        "python-stdlib",
        "data.max_documents=12",
        "tokenizer.name=byte",
        "data.shard_tokens=40000",
        "data.num_workers=1",
    )
    shards = meta["splits"]["train"]["shards"]
    assert len(shards) > 2
    dataset = TokenizedDataset(find_dataset(tmp_path, "python-stdlib"))
    for shard in dataset.splits["train"]:
        assert shard.doc_starts[0] == 0 and shard.tokens[-1] == dataset.eos_id
    total = sum(s.num_tokens for s in dataset.splits["train"])
    assert total == meta["splits"]["train"]["tokens"]
    config = data_config(
        tokenizer="byte", max_documents=12, dataset_options={"shard_tokens": 40000}
    )
    data = open_training_data(tmp_path, config, seq_len=256, batch=4, seed=0)
    windows = data._train[0].known()
    assert windows == sum((s.num_tokens - 1) // 256 for s in dataset.splits["train"])
    seen = np.concatenate([data.batch(s)["inputs"] for s in range(windows // 4)])
    assert len({row.tobytes() for row in seen}) == len(seen)  # no window twice in an epoch


def test_max_tokens_keeps_the_same_leading_documents_for_any_worker_count(tmp_path):
    common = [
        "data.max_documents=60",
        "data.unit_bytes=20000",
        "tokenizer.name=byte",
        "data.max_tokens=150000",
    ]
    metas = [
        tokenize(tmp_path / f"w{w}", "python-stdlib", *common, f"data.num_workers={w}")
        for w in (1, 2)
    ]
    assert metas[0]["files"] == metas[1]["files"]
    meta = metas[0]
    assert meta["tokens"] >= 150_000 and meta["documents"] < 60
    directory = find_dataset(tmp_path / "w1", "python-stdlib")
    dataset = TokenizedDataset(directory)
    lengths = [np.diff(np.append(s.doc_starts, s.num_tokens)) for s in dataset.splits["train"]]
    assert sum(int(x.sum()) for x in lengths) == meta["splits"]["train"]["tokens"]
