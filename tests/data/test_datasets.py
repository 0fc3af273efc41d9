"""Datasets: the embedded corpus, local files in fineweb's schema, chat data, bad input."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from theseus.core.data.errors import DataError
from theseus.data.datasets.chat import Addition, AdditionConfig, Alpaca, AlpacaConfig
from theseus.data.datasets.fineweb import Fineweb, FinewebConfig
from theseus.data.datasets.stdlib import PythonStdlib, StdlibConfig, stdlib_files
from theseus.data.datasets.text_files import TextFiles, TextFilesConfig
from theseus.data.errors import BadRecordError
from theseus.data.tokenize.options import job_schema


def node(schema: type, **values: object) -> object:
    """The typed ``data`` group a tokenize job gives the dataset (its options + the job's)."""
    return OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(job_schema("test", schema)), values)
    )


def test_stdlib_corpus_is_large_real_and_ordered():
    files = stdlib_files()
    assert files == stdlib_files()
    names = [f.name for f in files]
    assert "os.py" in names and "json" in {f.parent.name for f in files}
    total = sum(f.stat().st_size for f in files)
    assert total >= 5_000_000
    docs = list(PythonStdlib(node(StdlibConfig, max_documents=5)).records())
    assert len(docs) == 5 and docs == list(
        PythonStdlib(node(StdlibConfig, max_documents=5)).records()
    )


def test_fineweb_local_parquet_and_jsonl(tmp_path):
    pq.write_table(
        pa.table({"text": ["doc one", "doc two"], "id": ["a", "b"], "url": ["u", "v"]}),
        tmp_path / "000_00000.parquet",
    )
    (tmp_path / "001.jsonl").write_text(json.dumps({"text": "doc three", "id": "c"}) + "\n")
    pattern = f"{tmp_path}/*.parquet,{tmp_path}/*.jsonl"
    docs = list(Fineweb(node(FinewebConfig, files=pattern)).records())
    assert docs == ["doc one", "doc two", "doc three"]
    docs = list(Fineweb(node(FinewebConfig, files=pattern, max_documents=2)).records())
    assert docs == ["doc one", "doc two"]


def test_fineweb_without_network_or_files_says_what_to_do():
    with pytest.raises(DataError, match="data.files"):
        list(Fineweb(node(FinewebConfig)).records())


def test_glob_matching_nothing_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "nothing-*.jsonl")
    with pytest.raises(DataError, match=re.escape(f"the pattern '{pattern}' matches no file")):
        list(TextFiles(node(TextFilesConfig, files=pattern)).records())


def test_jsonl_line_without_field_names_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n{"body": "no text"}\n{"text": "ok too"}\n')
    with pytest.raises(BadRecordError, match=re.escape(f"{path}:2: no string field 'text'")):
        list(TextFiles(node(TextFilesConfig, files=str(path))).records())
    dataset = TextFiles(node(TextFilesConfig, files=str(path), skip_bad_records=True))
    assert list(dataset.records()) == ["ok", "ok too"]
    assert dataset.skipped == 1


def test_parquet_without_the_column_names_the_file(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"body": ["a"]}), path)
    with pytest.raises(BadRecordError, match=re.escape(f"{path}: no column 'text'")):
        list(TextFiles(node(TextFilesConfig, files=str(path))).records())


def test_alpaca_to_chat(tmp_path):
    path = tmp_path / "alpaca.jsonl"
    rows = [
        {"instruction": "Add", "input": "1 and 2", "output": "3"},
        {"instruction": "Greet", "input": "", "output": "Hi"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    chats = list(Alpaca(node(AlpacaConfig, files=str(path))).records())
    assert chats[0] == [
        {"role": "user", "content": "Add\n\n1 and 2"},
        {"role": "assistant", "content": "3"},
    ]
    assert chats[1][0]["content"] == "Greet"


def test_addition_is_a_function_of_the_seed():
    make = lambda seed: list(Addition(node(AdditionConfig, num_examples=20, seed=seed)).records())  # noqa: E731
    assert make(1) == make(1) and make(1) != make(2)
    for chat in make(3):
        a, b = chat[0]["content"].removeprefix("What is ").removesuffix("?").split("+")
        assert int(chat[1]["content"]) == int(a) + int(b)


def test_fineweb_streams_through_hf_datasets_from_a_repo_clone(tmp_path):
    """The streaming path itself (``datasets.load_dataset(..., streaming=True)``), on a
    local clone laid out like the hub repo (README configs + parquet shards)."""
    shards = tmp_path / "repo" / "sample" / "10BT"
    shards.mkdir(parents=True)
    for i in range(2):
        texts = [f"streamed document {i}-{j}" for j in range(3)]
        pq.write_table(
            pa.table({"text": texts, "id": ["x"] * 3}), shards / f"{i:03d}_00000.parquet"
        )
    (tmp_path / "repo" / "README.md").write_text(
        "---\nconfigs:\n- config_name: sample-10BT\n  data_files:\n"
        "  - split: train\n    path: sample/10BT/*\n---\n"
    )
    config = node(FinewebConfig, repo=str(tmp_path / "repo"), subset="sample-10BT", max_documents=4)
    docs = list(Fineweb(config).records())
    assert docs == [f"streamed document 0-{j}" for j in range(3)] + ["streamed document 1-0"]
