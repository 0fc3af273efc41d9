"""``byte``: the 256 byte values plus the special tokens (no training, no files)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theseus.data.tokenizers.base import (
    EOS,
    PAD,
    SPECIAL_TOKENS,
    Corpus,
    Tokenizer,
    sha256_text,
    write_config,
)


@dataclass
class ByteConfig:
    pass


class ByteTokenizer(Tokenizer):
    kind = "byte"

    def __init__(self) -> None:
        self.specials = {token: 256 + i for i, token in enumerate(SPECIAL_TOKENS)}
        self.vocab_size = 256 + len(SPECIAL_TOKENS)
        self.eos_id = self.specials[EOS]
        self.pad_id = self.specials[PAD]

    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> ByteTokenizer:
        return cls()

    @classmethod
    def load(cls, directory: Path) -> ByteTokenizer:
        return cls()

    def save(self, directory: Path) -> None:
        write_config(directory, {"kind": self.kind, "specials": SPECIAL_TOKENS})

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]

    def encode_arrays(self, texts: Sequence[str]) -> list[Any]:
        import numpy as np

        return [np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.uint32) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        names = {i: t for t, i in self.specials.items()}
        out: list[str] = []
        buffer = bytearray()
        for i in ids:
            if i < 256:
                buffer.append(int(i))
                continue
            out.append(buffer.decode("utf-8", errors="replace"))
            buffer.clear()
            out.append(names.get(int(i), ""))
        out.append(buffer.decode("utf-8", errors="replace"))
        return "".join(out)

    def special_id(self, token: str) -> int | None:
        return self.specials.get(token)

    def fingerprint(self) -> str:
        return sha256_text("byte:" + ",".join(SPECIAL_TOKENS))

    def hf_json(self) -> str:
        """This tokenizer as a Hugging Face ``tokenizer.json`` (the same ids): for export."""
        from theseus.data.tokenizers.byte_json import byte_tokenizer_json

        return byte_tokenizer_json()
