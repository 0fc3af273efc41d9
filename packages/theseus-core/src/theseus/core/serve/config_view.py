"""Saved configs as the web view shows them: flattened to dotted keys, secrets redacted,
compared across runs.

Redaction is the one rule of :mod:`theseus.core.redaction` (by key name, by value shape, by
the values of the server's secret environment variables). A key any part of which names a
credential has its value replaced by :data:`REDACTED`, in the flattened values and in the
text alike (a block under such a key is dropped from the text, and each value below it is
redacted). ``tokenizer``, ``total_tokens`` or ``n_experts_per_token`` are not credentials
and are shown.
"""

from __future__ import annotations

from typing import Any

import yaml
from theseus.core import safe_yaml
from theseus.core.redaction import (
    REDACTED,
    environment_secrets,
    is_secret_key,
    redact_lines,
    redact_record,
    redact_tree,
)
from theseus.core.redaction import redact_config_text as redact_text

__all__ = [
    "REDACTED", "diff", "flatten", "parse", "redact_json", "redact_lines", "redact_text",
    "redact_tree",
]  # fmt: skip


def redact_json(record: dict[str, Any]) -> dict[str, Any]:
    """A record (``job.json``) as shown: secret-named keys at any depth (``history``'s
    config changes are keyed by config keys) redacted, its ``key`` (the job key) shown."""
    return redact_record(record)


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b.c": value}``; lists and scalars are leaves; an empty
    mapping is a leaf ``{}`` (so a key that exists is never lost)."""
    if isinstance(node, dict) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: node} if prefix else {}


def redact_values(flat: dict[str, Any]) -> dict[str, Any]:
    secrets = list(environment_secrets().values())
    return {
        k: (
            REDACTED if is_secret_key(k) and v not in ("", None) else redact_tree(v, False, secrets)
        )
        for k, v in flat.items()
    }


def parse(text: str) -> tuple[dict[str, Any], str | None]:
    """Flattened, redacted values of a config's text, and the problem if it is not a YAML
    mapping."""
    try:
        data = safe_yaml.load(text) if text else {}
    except yaml.YAMLError as error:
        return {}, f"not valid YAML: {safe_yaml.problem(error)}"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return {}, f"holds a YAML {type(data).__name__}, not a mapping"
    return redact_values(flatten(data)), None


_MISSING = object()


def diff(configs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Keys whose values differ between runs (or that some runs lack), sorted:
    ``[{"key": k, "values": {run: value or None}, "missing": [runs without it]}]``."""
    keys = sorted({key for flat in configs.values() for key in flat})
    rows = []
    for key in keys:
        values = {run: flat.get(key, _MISSING) for run, flat in configs.items()}
        distinct = {repr(v) for v in values.values()}
        if len(distinct) > 1:
            rows.append(
                {
                    "key": key,
                    "values": {r: (None if v is _MISSING else v) for r, v in values.items()},
                    "missing": [r for r, v in values.items() if v is _MISSING],
                }
            )
    return rows
