"""Move datasets of the older layout (format 1: ``<root>/data/<name>[-<suffix>]/``) to the
current one (``<root>/data/<name>/<variant>/``), keeping every token file as it is.

Format 1 shards are format 2 shards of a finished dataset; only the folder and the records
change: ``settings.json`` takes the current settings (a tokenizer file counted by its
content, from the dataset's own copy) and ``metadata.json`` the format version and content
digest. An interrupted format-1 tokenization moves too (its finished units are kept and the
next tokenize job goes on from them). Runs from before the move find their data again
through their config; their record of hashed files is keyed by the old folder, so their
next start hashes once more.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from theseus.core.data import format as fmt
from theseus.core.data.identity import content_digest
from theseus.core.locks import exclusive
from theseus.data.tokenize.identity import tokenizer_identity, with_digest

log = logging.getLogger(__name__)
_CHECKED: set[str] = set()


def migrate_root(root: str | os.PathLike) -> None:
    """Migrate every format-1 dataset under ``<root>/data`` (once per root and process)."""
    data = fmt.data_root(root)
    key = str(data.resolve()) if data.exists() else str(data)
    if key in _CHECKED or not data.is_dir():
        return
    old = []
    for folder in data.iterdir():
        settings_file = folder / fmt.SETTINGS
        if folder.name.startswith(".") or not settings_file.is_file():
            continue
        found = fmt.read_json(settings_file)
        if isinstance(found, dict) and found.get("format_version") == 1 and found.get("dataset"):
            old.append((folder, found))
    # plain names first: data/<name> becomes the parent of the variants
    for folder, settings in sorted(old, key=lambda f: (f[0].name != f[1]["dataset"], f[0].name)):
        migrate_folder(data, folder, settings)
    _CHECKED.add(key)


def migrate_folder(data: Path, folder: Path, settings: dict[str, Any]) -> Path | None:
    """Move one format-1 dataset into its variant folder; returns where it went."""
    name = str(settings["dataset"])
    suffix = folder.name[len(name) + 1 :] if folder.name.startswith(name + "-") else ""
    if folder.name not in (name, f"{name}-{suffix}"):
        suffix = folder.name
    saved = folder / fmt.TOKENIZER_DIR
    tokenizer = dict(settings.get("tokenizer", {}))
    if tokenizer.get("path") and (saved / "tokenizer.json").is_file():
        tokenizer["path"] = str(saved)  # the same text as the file it was made from
    elif not saved.is_dir():
        with exclusive(folder, f"dataset directory {folder}", "wait for it to finish"):
            shutil.rmtree(folder)
        log.warning(
            "removed %s: an interrupted tokenization from an older theseus, stopped before "
            "its tokenizer existed (nothing to keep)",
            folder,
        )
        return None
    current = with_digest(
        {
            "format_version": fmt.FORMAT_VERSION,
            "dataset": name,
            "data": settings.get("data", {}),
            "tokenizer": tokenizer_identity(tokenizer),
        }
    )
    from theseus.core.data.identity import variant_name

    target = fmt.dataset_dir(data.parent, name, variant_name(current, suffix))
    with exclusive(folder, f"dataset directory {folder}", "wait for it to finish"):
        aside = data / f".migrating-{folder.name}"
        os.rename(folder, aside)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(aside, target)
        fmt.write_json_atomic(target / fmt.SETTINGS, current)
        metadata_path = target / fmt.METADATA
        if metadata_path.exists():
            metadata = fmt.read_json(metadata_path)
            metadata.update(
                format_version=fmt.FORMAT_VERSION,
                settings=current,
                content=content_digest(metadata["files"]),
            )
            fmt.write_json_atomic(metadata_path, metadata)
    log.warning("moved %s (a dataset of an older theseus) to %s", folder, target)
    return target
