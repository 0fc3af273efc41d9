"""Reading local files by glob: .txt, .jsonl (a field per line) and .parquet (a column)."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path

from theseus.core import safe_json
from theseus.core.data.errors import DataError
from theseus.data.errors import BadRecordError

SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")


def expand(patterns: str, key: str = "data.files") -> list[Path]:
    """Sorted files matched by comma-separated globs; a glob matching nothing is an error."""
    if not str(patterns).strip():
        raise DataError(
            f"{key} is empty: give a glob of local files, e.g. {key}='shards/*.parquet'"
        )
    files: list[Path] = []
    for pattern in (p.strip() for p in str(patterns).split(",") if p.strip()):
        matches = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        matches = [m for m in matches if os.path.isfile(m)]
        if not matches:
            raise DataError(f"{key}: the pattern {pattern!r} matches no file")
        files.extend(Path(m) for m in matches)
    return files


class Skips:
    """Counts skipped bad records when skipping is allowed, else raises."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.count = 0

    def bad(self, message: str) -> None:
        if not self.allowed:
            raise BadRecordError(message + " (or set data.skip_bad_records=true to skip it)")
        self.count += 1


def read_jsonl(path: Path, skips: Skips) -> Iterator[tuple[int, dict]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = safe_json.loads(line)
            except json.JSONDecodeError as error:
                skips.bad(f"{path}:{number}: not valid JSON ({error.msg})")
                continue
            if not isinstance(row, dict):
                skips.bad(f"{path}:{number}: expected a JSON object")
                continue
            yield number, row


def read_texts(path: Path, field: str, skips: Skips) -> Iterator[str]:
    """The documents of one file: a whole .txt, or ``field`` of each jsonl line/parquet row."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        text = path.read_text(encoding="utf-8", errors="replace")
        if text:
            yield text
    elif suffix in (".jsonl", ".json"):
        for number, row in read_jsonl(path, skips):
            value = row.get(field)
            if not isinstance(value, str):
                skips.bad(f"{path}:{number}: no string field {field!r}")
                continue
            yield value
    elif suffix == ".parquet":
        yield from _parquet_texts(path, field, skips)
    else:
        raise DataError(f"{path}: unsupported file type {suffix!r}; expected one of {SUFFIXES}")


def _parquet_texts(path: Path, field: str, skips: Skips) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:
        raise DataError(f"{path}: not a readable parquet file ({error})") from error
    if field not in parquet.schema_arrow.names:
        raise BadRecordError(
            f"{path}: no column {field!r} (columns: {', '.join(parquet.schema_arrow.names)})"
        )
    row = 0
    for batch in parquet.iter_batches(columns=[field], batch_size=1024):
        for value in batch.column(0).to_pylist():
            row += 1
            if not isinstance(value, str):
                skips.bad(f"{path}: row {row} has no string {field!r}")
                continue
            yield value
