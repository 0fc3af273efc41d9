"""The settings that identify a tokenize job's output, and the folder they name.

The settings are the job's typed ``data`` options (those that change the output) and its
``tokenizer`` options, with a tokenizer file counted by its content: ``tokenizer.path``
becomes ``source_sha256``, the digest of the ``tokenizer.json`` text and the chat template
read with it. The same options give the same folder whoever computes them (the job, a
trainer's prerequisite, the migration of an older root); another tokenizer, or the same
file edited, gives another folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from theseus.core.data import format as fmt
from theseus.core.data.identity import IDENTITY_KEY, identity_digest, variant_name
from theseus.data.errors import TokenizerError

# Options that do not change the output (left out of the settings).
RUNTIME_ONLY = ("num_workers", "unit_bytes", "suffix")


class TokenizerNotReady(TokenizerError):
    """The tokenizer file the settings count by content does not exist (yet)."""


def source_digest(tokenizer_json: str, folder: Path) -> str:
    """The digest of a Hugging Face tokenizer: its JSON text, and the chat template and
    template tokens read from its folder (a theseus-saved folder gives the saved ones)."""
    from theseus.data.tokenizers.huggingface import read_chat_template

    template, tokens = read_chat_template(folder)
    tokens = tokens if template else {}  # the template's variables matter only with one
    payload = json.dumps([tokenizer_json, template or "", tokens], sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8", errors="surrogatepass")).hexdigest()


def tokenizer_identity(tokenizer: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer options with ``path`` (a local file or folder) replaced by the content
    digest ``source_sha256``; a hub id stays as given."""
    if not tokenizer.get("path"):
        return dict(tokenizer)
    out = {k: v for k, v in tokenizer.items() if k != "path"}
    given = str(tokenizer["path"])
    path = Path(given).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        out["source_sha256"] = source_digest(path.read_text(), path.parent)
        return out
    if "/" in given and not given.startswith((".", "/", "~")) and not path.parent.exists():
        out["hub"] = given  # a Hugging Face hub id: identified by its name
        return out
    raise TokenizerNotReady(f"tokenizer.path {given!r}: no such tokenizer.json file")


def as_plain(value: Any) -> Any:
    """A config dataclass instance as a dict; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def identity_settings(name: str, data: Any, tokenizer: Any) -> dict[str, Any]:
    """What makes the output of ``data/tokenize/<name>`` with these typed config groups."""
    options = dict(as_plain(data))
    kept = {k: v for k, v in options.items() if k not in RUNTIME_ONLY}
    described = as_plain(tokenizer)
    return {
        "format_version": fmt.FORMAT_VERSION,
        "dataset": name,
        "data": kept,
        "tokenizer": tokenizer_identity(dict(described)),
    }


def with_digest(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as ``settings.json`` holds them: plus their digest."""
    return {**settings, IDENTITY_KEY: identity_digest(settings)}


def output_dir(root: str | os.PathLike, name: str, settings: dict[str, Any], suffix: str) -> Path:
    """``<root>/data/<name>/<variant>`` for these settings."""
    return fmt.dataset_dir(root, name, variant_name(settings, suffix))
