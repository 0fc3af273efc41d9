"""Dataset identity: folders named by what makes the data, a run's record of what it trained
on (refused, in one line, when the data changed), and the move of format-1 roots."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from datatest_helpers import checksums, data_config
from theseus.core.data import SettingsConflictError, tokenize_prerequisites
from theseus.core.data import format as fmt
from theseus.core.data.api import dataset_path, find_dataset, open_training_data
from theseus.core.data.identity import DataIdentityError
from theseus.core.errors import ConfigError
from theseus.core.plugins import registries
from theseus.core.runner import run, run_prerequisite

REPO = Path(__file__).resolve().parents[2]


def open_for_run(root: Path, data, run_dir: Path | None = None):
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
    return open_training_data(root, data, seq_len=32, batch=4, seed=0, run_dir=run_dir)


def prepare_all(root: Path, data) -> None:
    for prerequisite in tokenize_prerequisites(data, root):
        run_prerequisite(prerequisite, str(root), registries())


def replace_data(folder: Path, made_by: Path) -> None:
    """``folder`` deleted and tokenized again, producing what ``made_by`` holds, under the
    same settings (as another version of a tokenizer library would)."""
    settings = json.loads((folder / fmt.SETTINGS).read_text())
    shutil.rmtree(folder)
    shutil.copytree(made_by, folder)
    (folder / fmt.SETTINGS).write_text(json.dumps(settings))
    metadata = json.loads((folder / fmt.METADATA).read_text())
    (folder / fmt.METADATA).write_text(json.dumps({**metadata, "settings": settings}))


def test_two_tokenizers_of_one_corpus_live_side_by_side(stdlib_root, stdlib_data, tmp_path):
    """The README's order: BPE data exists; a byte-level job finds its own folder."""
    root = tmp_path / "root"
    shutil.copytree(stdlib_root / "data", root / "data")
    byte = dataclasses.replace(stdlib_data, tokenizer="byte")
    prepare_all(root, byte)
    bpe_data, byte_data = open_for_run(root, stdlib_data), open_for_run(root, byte)
    assert bpe_data.vocab_size == 512 and byte_data.vocab_size == 256 + 6
    paths = {bpe_data.datasets[0].path.name[:7], byte_data.datasets[0].path.name[:5]}
    assert paths == {"bpe512-", "byte-"}
    assert bpe_data.datasets[0].path.parent == byte_data.datasets[0].path.parent
    before = checksums(byte_data.datasets[0].path)
    for prerequisite in tokenize_prerequisites(byte, root):  # the same one is not made twice
        assert Path(prerequisite.output) == byte_data.datasets[0].path
        run(prerequisite.key, prerequisite.overrides, root=root, name="again")
    assert checksums(byte_data.datasets[0].path) == before


def test_other_options_name_another_folder_and_a_mislabelled_one_is_refused(
    stdlib_root, stdlib_data, tmp_path
):
    """A run asking for 2000 documents never reads a 40-document tokenization."""
    more = dataclasses.replace(stdlib_data, max_documents=2000)
    assert dataset_path(stdlib_root, more) != dataset_path(stdlib_root, stdlib_data)
    root = tmp_path / "root"
    source = dataset_path(stdlib_root, stdlib_data)
    shutil.copytree(source, dataset_path(root, more))  # 40 documents where 2000 belong
    with pytest.raises(SettingsConflictError, match="made with other settings than its name"):
        open_for_run(root, more)


def test_a_resume_refuses_another_bpe_of_the_same_vocabulary_size(
    stdlib_root, stdlib_data, tmp_path
):
    root, run_dir = tmp_path / "root", tmp_path / "root" / "runs" / "r"
    shutil.copytree(stdlib_root / "data", root / "data")
    open_for_run(root, stdlib_data, run_dir)  # the run trains: its data is recorded
    other = dataclasses.replace(stdlib_data, tokenizer_options={"train_bytes": 50_000})
    prepare_all(root, other)
    replace_data(dataset_path(root, stdlib_data), dataset_path(root, other))
    with pytest.raises(DataIdentityError) as error:
        open_for_run(root, stdlib_data, run_dir)
    message = str(error.value)
    assert "another tokenizer of the same vocabulary size 512" in message and "\n" not in message


def test_a_resume_names_a_changed_vocabulary_size(stdlib_root, stdlib_data, tmp_path):
    root, run_dir = tmp_path / "root", tmp_path / "root" / "runs" / "r"
    shutil.copytree(stdlib_root / "data", root / "data")
    open_for_run(root, stdlib_data, run_dir)
    smaller = dataclasses.replace(stdlib_data, vocab_size=384)
    prepare_all(root, smaller)
    replace_data(dataset_path(root, stdlib_data), dataset_path(root, smaller))
    with pytest.raises(DataIdentityError, match="vocabulary of 512 tokens; .* with 384 tokens"):
        open_for_run(root, stdlib_data, run_dir)


def corpus_config(files: str) -> object:
    return data_config(
        dataset="text-files", tokenizer="byte", files=files, validation_fraction=0.1,
        num_workers=1,
    )  # fmt: skip


def documents_of(opened) -> int:
    return sum(len(s.doc_starts) for split in opened.datasets[0].splits.values() for s in split)


def test_a_resume_refuses_fewer_documents_under_the_same_settings(tmp_path):
    """The folder was tokenized again, under the same settings, into other token files (as
    another corpus, or another version of a tokenizer library, would make)."""
    corpus, other = tmp_path / "corpus.jsonl", tmp_path / "other.jsonl"
    lines = [json.dumps({"text": f"document {i}: " + "words " * 40}) for i in range(30)]
    corpus.write_text("\n".join(lines) + "\n")
    other.write_text("\n".join(lines[:12]) + "\n")
    data, smaller = corpus_config(str(corpus)), corpus_config(str(other))
    root, run_dir = tmp_path / "root", tmp_path / "root" / "runs" / "r"
    prepare_all(root, data)
    open_for_run(root, data, run_dir)
    prepare_all(root, smaller)
    replace_data(dataset_path(root, data), dataset_path(root, smaller))
    with pytest.raises(DataIdentityError) as error:
        open_for_run(root, data, run_dir)
    assert "(30 documents" in str(error.value) and "(12 documents" in str(error.value)


def test_files_that_changed_are_tokenized_again_for_a_new_run_and_a_resume_keeps_its_data(
    tmp_path,
):
    """Before: after the files of a glob grew and a new file appeared, a new run with the
    same glob trained on the old tokenization ("already finished", no note): the folder was
    named by the glob, not by the files. Now the files' stamp names it too; a run started
    before resumes on the tokenization it recorded, without tokenizing anything."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(2):
        (folder / f"part-{i}.txt").write_text(f"document {i}: " + "words " * 40)
    data = corpus_config(f"{folder}/*.txt")
    root, old_run, new_run = (
        tmp_path / "root",
        tmp_path / "root/runs/old",
        tmp_path / "root/runs/new",
    )
    prepare_all(root, data)
    before = open_for_run(root, data, old_run)
    assert documents_of(before) == 2

    (folder / "part-1.txt").write_text("document 1, longer now: " + "more words " * 60)
    (folder / "part-2.txt").write_text("document 2, new: " + "words " * 40)
    assert dataset_path(root, data) != before.datasets[0].path  # the files name the folder
    assert tokenize_prerequisites(data, root, run_dir=old_run) == []  # a resume: nothing to do
    resumed = open_for_run(root, data, old_run)
    assert resumed.datasets[0].path == before.datasets[0].path and documents_of(resumed) == 2

    (pending,) = tokenize_prerequisites(data, root)  # a new run: the files as they are
    assert Path(pending.output) == dataset_path(root, data)
    prepare_all(root, data)
    now = open_for_run(root, data, new_run)
    assert now.datasets[0].path == Path(pending.output) and documents_of(now) == 3

    shutil.rmtree(before.datasets[0].path)  # the old run's data gone: refused, naming why
    with pytest.raises(DataIdentityError, match=r"settings differ in sources\.bytes: "):
        open_for_run(root, data, old_run)


def test_a_refused_resume_is_one_line_on_the_command_line(stdlib_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(stdlib_root / "data", root / "data")
    for run_dir in (stdlib_root / "runs").glob("data-tokenize-*"):
        shutil.copytree(run_dir, root / "runs" / run_dir.name)
    args = [
        "gpt/train/pretrain",
        "model.n_layers=1",
        "model.d_model=32",
        "model.n_heads=2",
        "model.max_seq_len=32",
        "training.seq_len=32",
        "training.global_batch_size=2",
        "training.total_steps=1",
        "eval.batches=1",
        "logging.progress=false",
        "data.max_documents=40",
        "data.vocab_size=512",
        "data.validation_fraction=0.1",
    ]
    # The first attempt records its data, then stops on a model mismatch (no training is
    # needed to have a run whose data is recorded); the same command later is a resume.
    args.append("model.vocab_size=100")
    with pytest.raises(ConfigError, match="model.vocab_size=100 disagrees"):
        run(args[0], args[1:], root=root, name="trained")
    config = data_config(vocab_size=512, max_documents=40, validation_fraction=0.1)
    smaller = dataclasses.replace(config, vocab_size=384)
    prepare_all(root, smaller)
    replace_data(dataset_path(root, config), dataset_path(root, smaller))
    resumed = subprocess.run(
        [sys.executable, "-m", "theseus.cli.main", "run", *args, "--name", "trained",
         "--root", str(root)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    last = resumed.stderr.strip().splitlines()[-1]
    assert "run trained trained on data/python-stdlib/bpe512-" in last, resumed.stderr[-3000:]
    assert "vocabulary of 512 tokens" in last and "Traceback" not in resumed.stderr


def test_a_format_1_root_moves_to_the_current_layout(stdlib_root, stdlib_data, tmp_path):
    """A root made by an older theseus: data/<name>/ (and data/<name>-<suffix>/) move into
    variant folders, token files untouched, and its tokenize run is found again."""
    root = tmp_path / "root"
    current = dataset_path(stdlib_root, stdlib_data)
    for folder, suffix in ((root / "data" / "python-stdlib", ""), (None, "old")):
        folder = folder or root / "data" / f"python-stdlib-{suffix}"
        shutil.copytree(current, folder)
        settings = json.loads((folder / fmt.SETTINGS).read_text())
        old = {k: v for k, v in settings.items() if k != "identity"} | {"format_version": 1}
        (folder / fmt.SETTINGS).write_text(json.dumps(old))
        metadata = json.loads((folder / fmt.METADATA).read_text())
        del metadata["content"]
        metadata.update(format_version=1, settings=old)
        (folder / fmt.METADATA).write_text(json.dumps(metadata))
    loader = open_for_run(root, stdlib_data)  # the first look at the root moves them
    assert loader.datasets[0].path == dataset_path(root, stdlib_data)
    assert checksums(loader.datasets[0].path) == checksums(current)
    variants = sorted(p.name for p in (root / "data" / "python-stdlib").iterdir())
    assert variants == [current.name, f"{current.name}-old"]
    assert find_dataset(root, f"python-stdlib/{current.name}-old").is_dir()
    assert (
        json.loads((current / fmt.METADATA).read_text())["content"]
        == json.loads((loader.datasets[0].path / fmt.METADATA).read_text())["content"]
    )
