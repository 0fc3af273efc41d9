"""A run's special tokens (bos/eos/pad ids), for generation and ``hf/export``.

The run itself is opened by core's :func:`theseus.core.train.opening.open_run`; its
tokenizer folder is ``OpenedRun.tokenizer_dir``. An imported run keeps its Hugging Face
``config.json`` in ``<run>/hf/``, which names the special tokens first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core import safe_json
from theseus.core.rundir import RunDir
from theseus.models.hf.checkpoint import special_tokens as of_config

if TYPE_CHECKING:
    from theseus.core.registry import Registries

RUN_SOURCE = "hf"  # <run>/hf/: an imported run's config.json (and generation_config.json)
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>")
PAD_CANDIDATES = ("<|pad|>", "<pad>", "[PAD]")


# ---------------------------------------------------------------------------- special tokens


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when there is none (missing, not JSON, a list)."""
    try:
        data = safe_json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def tokenizer_special_tokens(folder: Path, registries: Registries) -> dict[str, int]:
    """bos/eos/pad ids of a tokenizer folder: the tokens its ``tokenizer_config.json`` names
    (Hugging Face's, or theseus's ``eos_token``), else the usual names; bos defaults to eos
    (GPT-2's convention, and theseus's: documents are separated by eos only)."""
    file = folder / "tokenizer.json"
    if not file.is_file():  # byte, tiktoken, ...: theseus's own tokenizer says
        found = registries.hook.theseus_load_tokenizer(path=str(folder))
        if found is None:
            return {}
        return {
            "bos_token_id": found.eos_id,
            "eos_token_id": found.eos_id,
            "pad_token_id": found.pad_id,
        }
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(file))
    named = read_json_object(folder / "tokenizer_config.json")
    present = lambda tokens: next((t for t in tokens if tk.token_to_id(t) is not None), None)  # noqa: E731
    eos = _token_name(named.get("eos_token")) or present(EOS_CANDIDATES)
    pad = _token_name(named.get("pad_token")) or present(PAD_CANDIDATES)
    bos = _token_name(named.get("bos_token")) or eos
    ids: dict[str, int] = {}
    for kind, token in (("bos", bos), ("eos", eos), ("pad", pad)):
        if token is not None and (found := tk.token_to_id(token)) is not None:
            ids[f"{kind}_token_id"] = found
    return ids


def special_tokens(run: RunDir, folder: Path | None, registries: Registries) -> dict[str, Any]:
    """bos/eos/pad ids of a run: an imported run's own config.json, else its tokenizer's."""
    source = run.path / RUN_SOURCE / "config.json"
    if source.is_file():
        found = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in of_config(read_json_object(source))
        }
        if found:
            return found
    return tokenizer_special_tokens(folder, registries) if folder is not None else {}
