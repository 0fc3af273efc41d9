"""Fixtures of the data tests: small real corpora, tokenized once per session."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# The hub is unreachable here: fail fast instead of retrying (read when `datasets` loads).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="theseus-hf-cache-"))
import dataclasses  # noqa: E402

from datatest_helpers import STDLIB_SMALL, data_config, tokenize  # noqa: E402
from theseus.core.data import DataConfig, tokenize_prerequisites  # noqa: E402
from theseus.core.plugins import registries  # noqa: E402
from theseus.core.runner import run_prerequisite  # noqa: E402


@pytest.fixture(scope="session")
def stdlib_root(tmp_path_factory) -> Path:
    """A root holding python-stdlib tokenized with a small trained BPE (2 workers)."""
    root = tmp_path_factory.mktemp("stdlib-root")
    tokenize(
        root,
        "python-stdlib",
        *STDLIB_SMALL,
        "data.num_workers=2",
        "tokenizer.vocab_size=512",
        "data.validation_fraction=0.1",
    )
    return root


@pytest.fixture(scope="session")
def stdlib_data() -> DataConfig:
    """The DataConfig matching ``stdlib_root``."""
    return data_config(vocab_size=512, max_documents=40, validation_fraction=0.1)


@pytest.fixture(autouse=True)
def _offline_tiktoken(tmp_path, monkeypatch):
    """No tiktoken download cache from elsewhere: offline behaviour is what we test."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def mixture_root(stdlib_root, stdlib_data):
    """python-stdlib (bpe) plus the addition set tokenized with the same vocabulary."""
    mixture = {"python-stdlib": 3.0, "addition": 1.0}
    data = dataclasses.replace(stdlib_data, mixture=mixture, dataset_options={})
    prerequisites = tokenize_prerequisites(data, stdlib_root)
    assert [p.key for p in prerequisites] == [
        "data/tokenize/python-stdlib",
        "data/tokenize/addition",
    ]
    assert "tokenizer.name=hf" in prerequisites[1].overrides
    for prerequisite in prerequisites:
        run_prerequisite(prerequisite, str(stdlib_root), registries())
    return data
