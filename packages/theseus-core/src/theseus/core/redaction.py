"""What counts as a secret, by name and by shape, wherever theseus shows or sends values.

A *name* is secret when one of its words (split at ``.``, ``_``, ``-`` and camelCase) is a
credential word: it contains ``secret``, ``password``, ``passwd``, ``credential`` or
``bearer``; it starts with ``auth`` (``auth``, ``authorization``, ``authtoken``); or it is or
ends with ``token``, ``key`` or ``keys`` (``hf_token``, ``api_key``, ``wandbKey``,
``apikey``). Counts and tools are not credentials: ``tokenizer``, ``total_tokens``,
``max_new_tokens`` are shown.

A *value* is redacted by shape wherever it appears: the ``user:password@`` of a URL, and
what follows ``Bearer``.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
_WORDS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_CONTAINS = ("secret", "password", "passwd", "credential", "bearer")
_ENDS = ("token", "key", "keys")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")


def is_secret_word(word: str) -> bool:
    word = word.lower()
    return (
        any(part in word for part in _CONTAINS) or word.startswith("auth") or word.endswith(_ENDS)
    )


def is_secret_name(name: str) -> bool:
    """Whether any word of ``name`` (a key, a dotted key, an environment variable) names a
    credential (see the module docstring)."""
    return any(is_secret_word(word) for word in _WORDS.split(name.strip("'\"")) if word)


def redact_string(text: str) -> str:
    """``text`` with URL credentials and bearer tokens replaced by :data:`REDACTED`."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def redact_tree(node: Any, secret: bool = False) -> Any:
    """A JSON-like value with the value of every secret-named key (at any depth) replaced,
    and every string cleaned by :func:`redact_string`."""
    if secret and node not in ("", None, [], {}):
        return REDACTED
    if isinstance(node, dict):
        return {key: redact_tree(value, is_secret_name(str(key))) for key, value in node.items()}
    if isinstance(node, list):
        return [redact_tree(value) for value in node]
    if isinstance(node, str):
        return redact_string(node)
    return node


_ASSIGNMENT = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>\s*[=:]\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;]+)"
)


def redact_line(line: str) -> str:
    """A log line with ``KEY=VALUE`` / ``KEY: VALUE`` of secret-named keys, URL credentials
    and bearer tokens redacted."""

    def assignment(match: re.Match) -> str:
        if not is_secret_name(match.group("key")):
            return match.group(0)
        return f"{match.group('key')}{match.group('sep')}{REDACTED}"

    return _ASSIGNMENT.sub(assignment, redact_string(line))
