"""The tokenizer interface shared by every kind, and the saved-tokenizer layout.

A saved tokenizer is a directory with ``tokenizer_config.json`` (``kind`` names the
registered tokenizer that can load it) plus whatever files the kind needs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from theseus.core import safe_json
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.markers import (  # noqa: F401  (re-exported)
    END_OF_TURN,
    EOS,
    PAD,
    ROLE_TOKENS,
    SPECIAL_TOKENS,
    sha256_text,
)

CONFIG_FILE = "tokenizer_config.json"


Corpus = Callable[[], Iterator[str]]


class Tokenizer:
    """Encode text to ids and back. Subclasses set ``kind`` and implement the methods."""

    kind: ClassVar[str] = ""

    vocab_size: int
    eos_id: int
    pad_id: int
    # A Hugging Face jinja chat template chat data renders with (None: the built-in one).
    chat_template: str | None = None

    # ------------------------------------------------------------------ building
    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> Tokenizer:
        """Build from the job's ``tokenizer`` config; ``corpus()`` yields training text."""
        raise NotImplementedError

    @classmethod
    def load(cls, directory: Path) -> Tokenizer:
        raise NotImplementedError

    def save(self, directory: Path) -> None:
        """Write this tokenizer's files and ``tokenizer_config.json`` into ``directory``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ use
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of ordinary text (special-token strings are not parsed)."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_arrays(self, texts: Sequence[str]) -> list[Any]:
        """The ids of each text as a numpy array (what tokenization writes; a kind may
        produce arrays without Python lists)."""
        import numpy as np

        return [np.asarray(ids, np.uint32) for ids in self.encode_batch(texts)]

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def special_id(self, token: str) -> int | None:
        """The id of a special token, or None when this vocabulary has no such token."""
        return None

    # ------------------------------------------------------------------ chat
    def chat_template_source(self) -> str:
        """The chat template chat data is rendered with, as Hugging Face jinja."""
        from theseus.data.tokenizers.chat_template import template_source

        return template_source(self)

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The ids that prompt a model to answer ``messages``, in the chat template."""
        from theseus.data.tokenizers.chat_template import prompt_ids

        return prompt_ids(self, messages)

    def chat_stops(self) -> list[int]:
        """The ids that end an answer in the chat template, besides end-of-document."""
        from theseus.data.tokenizers.chat_template import stop_ids

        return stop_ids(self)

    # ------------------------------------------------------------------ description
    def describe(self) -> dict[str, Any]:
        """Saved in metadata.json; ``fingerprint`` identifies the exact vocabulary."""
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "fingerprint": self.fingerprint(),
        }

    def fingerprint(self) -> str:
        raise NotImplementedError


def write_config(directory: Path, data: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / CONFIG_FILE

    if not path.exists():
        raise TokenizerError(f"{path} does not exist: not a saved theseus tokenizer")
    return safe_json.loads(path.read_text())
