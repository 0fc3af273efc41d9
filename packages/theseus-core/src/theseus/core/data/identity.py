"""What identifies a tokenized dataset, and what a run records of the data it trained on.

A dataset's *settings* say what made it: the dataset and its options, the split options
and the tokenizer with its options (a tokenizer read from a file counts by the file's
content, not its path), and for a dataset read from local files their *sources* (a stamp of
the files the globs match: names, sizes and modification times). Their digest names the
folder (``<root>/data/<name>/<variant>``), so another tokenizer of the same corpus gets
another folder, the same settings find the same folder again, and files that changed (a
corpus that grew) get a folder of their own: a new run never trains on a tokenization of
files as they were. A run started before keeps training on the folder it recorded
(:func:`changed_sources_folder`). Its *content* digest covers every file of the finished dataset (token
files and tokenizer, through the checksums in ``metadata.json``).

A training run writes ``<run>/data-identity.json``: per dataset, the folder, the settings,
the tokenizer (kind, vocabulary size, fingerprint) and the content digest. A resume, or
any later open of the run's data, must find the same; anything else is refused in one line
naming what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from theseus.core.data import format as fmt
from theseus.core.data.errors import SettingsConflictError

RECORD = "data-identity.json"
IDENTITY_KEY = "identity"  # settings.json holds the settings and their digest under it
SOURCES_KEY = "sources"  # the stamp of the local files a dataset read (when it reads files)


class DataIdentityError(SettingsConflictError):
    """A run's data is not what the run trained on (or what its config asks for)."""


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def identity_digest(settings: dict[str, Any]) -> str:
    """The sha256 of the settings (without a digest already stored in them)."""
    plain = {k: v for k, v in settings.items() if k != IDENTITY_KEY}
    return hashlib.sha256(_canonical(plain)).hexdigest()


def variant_name(settings: dict[str, Any], suffix: str = "") -> str:
    """``<tokenizer label>-<10 hex digits of the settings>[-<suffix>]``, e.g.
    ``bpe8192-3f2a9c01d4`` or ``tiktoken-cl100k_base-0b1c2d3e4f``."""
    tokenizer = settings.get("tokenizer", {})
    label = str(tokenizer.get("name", "tok"))
    if tokenizer.get("vocab_size"):
        label += str(tokenizer["vocab_size"])
    if tokenizer.get("encoding"):
        label += f"-{tokenizer['encoding']}"
    label = re.sub(r"[^A-Za-z0-9_.+-]", "_", label)
    name = f"{label}-{identity_digest(without_sources(settings))[:10]}"
    sources = settings.get(SOURCES_KEY)
    if sources:  # the files' stamp, after the rest: the same options, other files
        name += f"-{hashlib.sha256(_canonical(sources)).hexdigest()[:8]}"
    return f"{name}-{suffix}" if suffix else name


def without_sources(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings but the stamp of the files they read (and their digest)."""
    return {k: v for k, v in settings.items() if k not in (IDENTITY_KEY, SOURCES_KEY)}


def changed_sources_folder(
    root: str | os.PathLike, run_dir: str | os.PathLike, name: str, output: str
) -> Path | None:
    """The folder run ``run_dir`` recorded for dataset ``name`` when its config now names
    ``output``, a folder of the same settings but for the files they read, which changed
    since the run started: a resume trains on what it recorded (a new run gets ``output``).
    None when the run recorded ``output`` itself, nothing, or other settings."""
    entries = DataRecord(run_dir).entries or []
    entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == name), None)
    if entry is None or not output or not isinstance(entry.get("settings"), dict):
        return None
    recorded = Path(root) / str(entry.get("path"))
    if recorded.name == Path(output).name or recorded.parent != Path(output).parent:
        return None
    base = variant_name(without_sources(entry["settings"]))
    current = Path(output).name
    if current.startswith(base + "-") and (recorded / "settings.json").is_file():
        return recorded
    return None


def content_digest(files: dict[str, Any]) -> str:
    """The sha256 of a finished dataset's file table (name, size and sha256 of each file)."""
    table = {name: [entry["bytes"], entry["sha256"]] for name, entry in sorted(files.items())}
    return hashlib.sha256(_canonical(table)).hexdigest()


def describe_settings(settings: dict[str, Any]) -> str:
    """One short line: ``tokenizer bpe(vocab_size=8192,...) max_documents=40 ...``."""
    tokenizer = settings.get("tokenizer", {})
    tok = ",".join(f"{k}={v}" for k, v in sorted(tokenizer.items()) if k != "name")
    data = settings.get("data", {})
    rest = " ".join(f"{k}={v}" for k, v in sorted(data.items()))
    return f"tokenizer {tokenizer.get('name')}({tok}) {rest}".strip()


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    """``tokenizer.vocab_size: 8192 -> 4096, data.max_documents: 0 -> 300`` (or "nothing")."""
    a = _flat({k: v for k, v in old.items() if k != IDENTITY_KEY})
    b = _flat({k: v for k, v in new.items() if k != IDENTITY_KEY})
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys) or "nothing"


def dataset_entry(root: str | os.PathLike, dataset: Any) -> dict[str, Any]:
    """What a run records of one opened dataset (a :class:`TokenizedDataset`)."""
    try:  # as the root names it (its data/ may be a link elsewhere)
        absolute = Path(os.path.abspath(dataset.path))
        where = absolute.relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        where = str(dataset.path)
    entry: dict[str, Any] = {
        "name": dataset.name,
        "path": where,
        "identity": identity_digest(dataset.settings),
        "settings": {k: v for k, v in dataset.settings.items() if k != IDENTITY_KEY},
        "tokenizer": {
            "kind": dataset.metadata["tokenizer"].get("kind"),
            "vocab_size": dataset.vocab_size,
            "fingerprint": dataset.tokenizer_fingerprint,
        },
        "content": None,
        "documents": None,
        "tokens": None,
    }
    if dataset.complete:
        entry.update(
            content=content_digest(dataset.metadata["files"]),
            documents=dataset.metadata.get("documents"),
            tokens=dataset.metadata.get("tokens"),
        )
    return entry


class DataRecord:
    """``<run>/data-identity.json``: the datasets a run trained on, checked on every open."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / RECORD
        self.entries: list[dict[str, Any]] | None = None
        if self.path.is_file():
            data = fmt.read_json(self.path)
            found = data.get("datasets") if isinstance(data, dict) else None
            if not isinstance(found, list):
                raise DataIdentityError(
                    f"{self.path} is malformed (no 'datasets' list): restore it, or start the "
                    "run over with --fresh"
                )
            self.entries = found

    def check(self, current: list[dict[str, Any]], write: bool = True) -> None:
        """Refuse (one line) when ``current`` is not the data recorded; record it when the
        run has no record yet, or the recorded data has been completed since (unless
        ``write`` is False: an inspection)."""
        run = self.run_dir.name
        if self.entries is None:
            if write:
                self._write(current)
            return
        before = [e.get("name") for e in self.entries]
        now = [e["name"] for e in current]
        if before != now:
            raise DataIdentityError(
                f"run {run} trained on datasets {before}; its config now names {now}: start a "
                "new run (--name) for other data"
            )
        changed = False
        for old, new in zip(self.entries, current, strict=True):
            _compare(run, old, new)
            if old.get("content") is None and new["content"] is not None:
                old.update(content=new["content"], documents=new["documents"])
                old.update(tokens=new["tokens"])
                changed = True
        if changed and write:
            self._write(self.entries)

    def _write(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        if not self.run_dir.is_dir():
            return
        text = json.dumps({"datasets": entries}, indent=2, sort_keys=True) + "\n"
        with tempfile.NamedTemporaryFile(
            "w", dir=self.run_dir, prefix=f".{RECORD}.", delete=False
        ) as handle:  # every process of a multi-host run may write: a file of its own
            handle.write(text)
        os.replace(handle.name, self.path)


def _compare(run: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    where = new["path"]
    advice = "restore the data the run trained on, or train a new run (--name or --fresh)"
    if old.get("path") != where or old.get("identity") != new["identity"]:
        diff = settings_differences(old.get("settings") or {}, new["settings"])
        raise DataIdentityError(
            f"run {run} trained on {old.get('path')}; its config now gives {where} (settings "
            f"differ in {diff}): {advice}"
        )
    told, tnew = old.get("tokenizer") or {}, new["tokenizer"]
    if told.get("vocab_size") != tnew["vocab_size"]:
        raise DataIdentityError(
            f"run {run} trained on {where} with a vocabulary of {told.get('vocab_size')} tokens; "
            f"that folder now holds data tokenized with {tnew['vocab_size']} tokens (tokenized "
            f"again since): {advice}"
        )
    if told.get("fingerprint") != tnew["fingerprint"]:
        raise DataIdentityError(
            f"run {run} trained on {where}; that folder now holds data made by another "
            f"tokenizer of the same vocabulary size {tnew['vocab_size']} (fingerprint "
            f"{str(told.get('fingerprint'))[:12]} -> {str(tnew['fingerprint'])[:12]}): {advice}"
        )
    if old.get("content") and new["content"] and old["content"] != new["content"]:
        raise DataIdentityError(
            f"run {run} trained on {where} ({old.get('documents')} documents, "
            f"{old.get('tokens')} tokens); its files now differ ({new['documents']} documents, "
            f"{new['tokens']} tokens: tokenized again since): {advice}"
        )
