"""Helpers of the data tests (a module of its own: test files import it by name)."""

from __future__ import annotations

import json
from pathlib import Path

from theseus.core.data import DataConfig
from theseus.core.runner import run

# A tiny slice of the standard library: fast to tokenize, still real text.
STDLIB_SMALL = ["data.max_documents=40", "data.unit_bytes=50000"]


def tokenize(root: Path, dataset: str, *overrides: str, name: str | None = None) -> dict:
    """Run ``data/tokenize/<dataset>`` in-process and return its metadata."""
    return run(f"data/tokenize/{dataset}", list(overrides), root=root, name=name)


def checksums(directory: Path) -> dict:
    return json.loads((directory / "metadata.json").read_text())["files"]


def data_config(**values: object) -> DataConfig:
    """The trainer's typed ``data`` group with these values."""
    return DataConfig(**values)
