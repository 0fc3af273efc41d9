"""The folder ``hf/export`` writes: never another model's files by surprise, never a mix.

An export into a folder that already holds files is refused unless ``hf.overwrite=true``:
the folder may be another model's (its config.json and weights would be replaced without a
word). With ``hf.overwrite=true`` the new files replace the old model's *whole*: every
Hugging Face model file the export does not write again (the shards and the
``*.index.json`` of a sharded checkpoint, ``pytorch_model.bin``, an old tokenizer, a PEFT
adapter and its ``base/``) is removed, so ``from_pretrained`` cannot load old shards beside
new weights. Files that are no part of a model (a README, ``.gitattributes``) stay.

The export is written into a staging folder beside the target first and moved in only once
complete, so a failure midway (a full disk) leaves the target as it was.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from theseus.models.errors import ModelError
from theseus.models.hf.file_modes import share_as_umask

#: Tokenizer files of a Hugging Face folder (copied on import, and on export when present).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
#: The model's own config files (kept with an imported run as its source).
SOURCE_FILES = ("config.json", "generation_config.json")
#: Names of a Hugging Face model folder's own files (besides the patterns below).
MODEL_FILES = frozenset({*SOURCE_FILES, "adapter_config.json", *TOKENIZER_FILES})
MODEL_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".index.json")
MODEL_FOLDERS = frozenset({"base"})  # a PEFT export's written-out base model


def is_model_file(entry: Path) -> bool:
    """Whether ``entry`` (in a model folder) belongs to the model: weights, shards and their
    index, config, tokenizer, adapter files, a PEFT ``base/``."""
    if entry.is_dir() and not entry.is_symlink():
        return entry.name in MODEL_FOLDERS
    return entry.name in MODEL_FILES or entry.name.endswith(MODEL_SUFFIXES)


def check_target(out: Path, overwrite: bool, key: str = "hf.dir") -> None:
    """Refuse, in one line, a target that is a file or a folder with files (unless
    ``overwrite``). Nothing is written."""
    if out.is_symlink() and not out.exists():
        raise ModelError(f"{key}: {out} is a broken symbolic link")
    if out.exists() and not out.is_dir():
        raise ModelError(f"{key}: {out} is a file, not a folder; choose a folder to export into")
    if not out.is_dir():
        check_creatable(out, key)
        return
    try:
        held = sorted(entry.name for entry in out.iterdir())
    except OSError as error:
        raise ModelError(f"{key}: {out} cannot be listed ({error.strerror or error})") from error
    if held and not overwrite:
        listing = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise ModelError(
            f"{key}: {out} is not empty ({listing}); export into an empty folder, or set "
            "hf.overwrite=true to replace the model files there"
        )


def check_creatable(out: Path, key: str) -> None:
    """Refuse, in one line, a folder ``out`` that cannot be made: the nearest of its parents
    that exists is a file, or a folder this process may not write into."""
    parent = out.absolute().parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ModelError(
            f"{key}: {out} cannot be made: {parent} is a file, not a folder; choose a folder "
            "to export into"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ModelError(f"{key}: {out} cannot be made: {parent} is not writable")


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A staging folder beside ``out`` to write the export into; on success its files
    replace the model files of ``out`` (created when missing), else it is removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.parent / f".{out.name}.export-{os.getpid()}-{time.time_ns()}"
    stage.mkdir()  # with the umask's mode: it may become ``out`` itself
    try:
        yield stage
        commit(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def commit(stage: Path, out: Path) -> None:
    """Move the staged export into ``out``: the old model files go first (all of them, so
    no stale shard or index stays), then the new ones move in, each with the mode a plain
    write gives (:func:`share_as_umask`)."""
    share_as_umask(stage)
    if not out.exists():
        os.replace(stage, out)
        return
    for entry in out.iterdir():
        if is_model_file(entry):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for entry in stage.iterdir():
        os.replace(entry, out / entry.name)
