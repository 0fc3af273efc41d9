"""Saved configs as the web view shows them: flattened to dotted keys, secrets redacted,
compared across runs.

A key any part of which names a credential (:func:`theseus.core.redaction.is_secret_name`:
``token``, ``hf_token``, ``api_key``, ``wandb_key``, ``auth``, ``bearer``, ``password``,
``secret``, ``credentials``...) has its value replaced by :data:`REDACTED`, in the
flattened values and in the text alike (a block under such a key is dropped from the text,
and each value below it is redacted); URL credentials (``user:password@``) and bearer
tokens are redacted in every value. ``tokenizer`` or ``total_tokens`` are not credentials
and are shown.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from theseus.core import safe_yaml
from theseus.core.redaction import REDACTED, is_secret_name, redact_line, redact_string, redact_tree

_YAML_KEY_LINE = re.compile(r"^(\s*(?:-\s+)?)([^\s:#][^:#]*?)(\s*:\s*)(\S.*)?$")


def is_secret_key(key: str) -> bool:
    """Whether any part of the dotted ``key`` names a credential."""
    return any(is_secret_name(part) for part in key.split("."))


__all__ = ["REDACTED", "diff", "flatten", "parse", "redact_json", "redact_lines", "redact_tree"]


def redact_json(record: dict[str, Any]) -> dict[str, Any]:
    """A record (``job.json``) as shown: secret-named keys at any depth (``history``'s
    config changes are keyed by config keys) and URL credentials redacted."""
    return redact_tree(record)


def redact_lines(lines: list[str]) -> list[str]:
    """Log lines as shown (secret assignments, URL credentials, bearer tokens redacted)."""
    return [redact_line(line) for line in lines]


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
    return {
        k: (REDACTED if is_secret_key(k) and v not in ("", None) else redact_tree(v))
        for k, v in flat.items()
    }


def redact_text(text: str) -> str:
    """YAML text with the value of every credential-named key replaced (line by line, so a
    file that does not parse is redacted too). A block value under such a key is dropped."""
    out: list[str] = []
    hiding_deeper_than: int | None = None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if hiding_deeper_than is not None:
            if line.strip() and indent <= hiding_deeper_than:
                hiding_deeper_than = None
            else:
                continue
        match = _YAML_KEY_LINE.match(line)
        if match and is_secret_key(match.group(2)):
            lead, key, _, value = match.groups()
            out.append(f"{lead}{key}: {REDACTED!r}")
            if not value:  # a block below it
                hiding_deeper_than = indent
            continue
        out.append(redact_string(line))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


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
