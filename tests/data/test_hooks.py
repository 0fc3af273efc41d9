"""theseus-data's answers to core's hooks: the tokenize run of a dataset, tokenizers by path."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from datatest_helpers import data_config
from theseus.core.data import DataConfig, DataError, tokenize_prerequisites
from theseus.core.data.api import find_dataset
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir
from theseus.core.runner import run_prerequisite
from theseus.core.tokenizer import Tokenizer
from theseus.data.errors import TokenizerError
from theseus.data.prepare import is_trained
from theseus.data.tokenizers.byte import ByteTokenizer
from theseus.data.tokenizers.huggingface import BPETokenizer, HFTokenizer

TEXT = "def f(x):\n    return x + 1  # héllo\n"


def prepare(data: DataConfig, name: str, primary: str, root: str | Path) -> object:
    hook = registries().hook
    return hook.theseus_prepare_dataset(data=data, name=name, primary=primary, root=str(root))


def load(path: str | Path) -> object:
    return registries().hook.theseus_load_tokenizer(path=str(path))


# ---------------------------------------------------------------- theseus_prepare_dataset
def test_only_bpe_is_a_trained_tokenizer():
    tokenizers = registries().tokenizers
    assert tokenizers.get("bpe").extra["trained"] is True
    assert [kind for kind in tokenizers.names() if is_trained(kind)] == ["bpe"]
    assert not is_trained("no-such-kind")


def test_the_tokenize_run_of_a_dataset_keeps_its_name_and_overrides():
    """Names and overrides as core built them before the hook: existing runs are found."""
    default = prepare(DataConfig(), "python-stdlib", "python-stdlib", "/r")
    assert default.key == "data/tokenize/python-stdlib"
    assert default.name == "data-tokenize-python-stdlib-f0efe00d"
    assert default.overrides == (
        "tokenizer.name=bpe",
        "tokenizer.vocab_size=8192",
        "data.validation_fraction=0.01",
    )
    small = data_config(vocab_size=512, max_documents=40, validation_fraction=0.1)
    assert prepare(small, "python-stdlib", "python-stdlib", "/r").name == (
        "data-tokenize-python-stdlib-e5e5cded"
    )


def test_a_mixture_shares_the_vocabulary_trained_on_its_first_dataset():
    mixture = {"python-stdlib": 3.0, "addition": 1.0}
    data = data_config(mixture=mixture, suffix="mix", num_workers=2)
    first, second = tokenize_prerequisites(data, "/r")
    assert first.name == "data-tokenize-python-stdlib-mix-09f7b4c1"
    assert re.fullmatch(r"data-tokenize-addition-mix-[0-9a-f]{8}", second.name)
    assert re.fullmatch(r"/r/data/python-stdlib/bpe8192-[0-9a-f]{10}-mix", first.output)
    assert second.output == ""  # named by the shared tokenizer's content: not trained yet
    assert second.key == "data/tokenize/addition"
    assert second.overrides == (
        "tokenizer.name=hf",
        f"tokenizer.path={first.output}/tokenizer/tokenizer.json",
        "data.validation_fraction=0.01",
        "data.suffix=mix",
        "data.num_workers=2",
    )
    untrained = dataclasses.replace(data, tokenizer="byte")
    assert "tokenizer.name=byte" in prepare(untrained, "addition", "python-stdlib", "/r").overrides


def test_options_reach_the_tokenize_job_of_the_first_dataset_only():
    data = data_config(
        dataset="text-files",
        files="/a/*.txt",
        max_documents=7,
        tokenizer="hf",
        tokenizer_options={"path": "/t/tokenizer.json"},
        dataset_options={"field": "body", "skip_bad_records": True},
        validation_fraction=0.0,
    )
    first = prepare(data, "text-files", "text-files", "/r")
    assert first.overrides == (
        "tokenizer.name=hf",
        "tokenizer.path=/t/tokenizer.json",
        "data.files=/a/*.txt",
        "data.max_documents=7",
        "data.field=body",
        "data.skip_bad_records=true",
        "data.validation_fraction=0.0",
    )
    other = prepare(data, "addition", "text-files", "/r")
    assert not any(o.startswith(("data.files", "data.field")) for o in other.overrides)


def test_an_unknown_dataset_gets_no_answer(tmp_path):
    assert prepare(DataConfig(), "no-such-dataset", "no-such-dataset", tmp_path) is None
    with pytest.raises(DataError, match="'no-such-dataset'"):
        tokenize_prerequisites(data_config(dataset="no-such-dataset"), tmp_path)


def test_the_prepared_run_reuses_the_fixture_output(stdlib_root, stdlib_data, caplog):
    """The overrides reproduce the settings the data was tokenized with."""
    prerequisite = prepare(stdlib_data, "python-stdlib", "python-stdlib", stdlib_root)
    folder = find_dataset(stdlib_root, "python-stdlib")
    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    with caplog.at_level("INFO"):
        run_prerequisite(prerequisite, str(stdlib_root), registries())
    assert RunDir(stdlib_root, prerequisite.name).read_record()["status"] == "finished"
    # reused: by this run, or by the same prerequisite run an earlier test of the session made
    said = ("complete with the same settings: reusing it", f"{prerequisite.name}) already finished")
    assert any(line in caplog.text for line in said), caplog.text
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == stamps


# ---------------------------------------------------------------- theseus_load_tokenizer
def test_a_tokenized_datasets_tokenizer_loads_through_the_hook(stdlib_root):
    directory = find_dataset(stdlib_root, "python-stdlib") / "tokenizer"
    tokenizer = load(directory)
    assert isinstance(tokenizer, BPETokenizer) and isinstance(tokenizer, Tokenizer)
    assert tokenizer.vocab_size == 512 and tokenizer.eos_id == 0
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT
    assert tokenizer.special_id("<|end|>") is not None
    assert tokenizer.special_id("<|no-such-token|>") is None


def test_a_tokenizer_json_loads_as_a_file_or_from_its_directory(stdlib_root, tmp_path):
    saved = find_dataset(stdlib_root, "python-stdlib") / "tokenizer"
    trained = load(saved)
    as_file = load(saved / "tokenizer.json")
    hub = tmp_path / "hf-model"  # a Hugging Face model directory: its own tokenizer_config
    hub.mkdir()
    shutil.copy(saved / "tokenizer.json", hub / "tokenizer.json")
    (hub / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1024}))
    from_directory = load(hub)
    for tokenizer in (as_file, from_directory):
        assert type(tokenizer) is HFTokenizer and isinstance(tokenizer, Tokenizer)
        assert tokenizer.fingerprint() == trained.fingerprint()
        assert tokenizer.encode(TEXT) == trained.encode(TEXT)


def test_other_saved_kinds_load_by_their_kind(tmp_path):
    ByteTokenizer().save(tmp_path / "byte")
    tokenizer = load(tmp_path / "byte")
    assert isinstance(tokenizer, ByteTokenizer) and tokenizer.encode("a") == [97]


def test_paths_without_a_tokenizer_get_no_answer(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "tokenizer.model").write_bytes(b"\x00sentencepiece")
    for path in ("no-such-path", "empty", "tokenizer.model"):
        assert load(tmp_path / path) is None


def test_a_broken_tokenizer_json_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerError, match="is not a Hugging Face tokenizer.json"):
        load(tmp_path)
