"""Examples of a benchmark: local jsonl in the public schema, else the Hugging Face hub."""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from theseus.core.evaluate.errors import EvaluationError
from theseus.core.requirements import pip_install


def _local(files: str) -> Iterator[dict]:
    paths: list[str] = []
    for pattern in [p.strip() for p in files.split(",") if p.strip()]:
        found = sorted(glob.glob(str(Path(pattern).expanduser())))
        if not found:
            raise EvaluationError(f"no file matches {pattern!r}")
        paths += found
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise EvaluationError(f"{path}:{number} is not JSON: {error}") from error


def _hub(name: str, config: Any) -> Iterator[dict]:
    try:
        import datasets
    except ImportError as error:
        raise EvaluationError(
            f"{name}: reading {config.hf_path} needs the datasets package: "
            f"{pip_install('theseus-core[hub]')}; or set evaluate.options.{name}.files to "
            "local jsonl"
        ) from error
    try:
        loaded = datasets.load_dataset(config.hf_path, config.hf_name or None, split=config.split)
    except Exception as error:  # offline, unknown dataset, ...
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EvaluationError(
            f"{name}: cannot load {config.hf_path} ({first}); offline, set "
            f"evaluate.options.{name}.files to local jsonl in the same schema"
        ) from error
    yield from loaded


def examples(name: str, config: Any, limit: int = 0) -> list[dict]:
    """The raw rows of evaluation ``name``: ``config.files`` if set, else the hub dataset."""
    rows = _local(config.files) if config.files else _hub(name, config)
    caps = [int(n) for n in (limit, getattr(config, "limit", 0)) if int(n) > 0]
    out: list[dict] = []
    for row in rows:
        if caps and len(out) >= min(caps):
            break
        out.append(dict(row))
    if not out:
        raise EvaluationError(f"{name}: no examples")
    return out


def field(name: str, row: dict, key: str) -> Any:
    if key not in row:
        raise EvaluationError(f"{name}: an example has no field {key!r} (fields: {sorted(row)})")
    return row[key]
