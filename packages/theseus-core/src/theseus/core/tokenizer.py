"""What core expects of a tokenizer (loaded through ``theseus_load_tokenizer``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> token ids. theseus-data's tokenizers implement it; so may any plugin's."""

    vocab_size: int
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> Sequence[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def special_id(self, token: str) -> int | None:
        """The id of a special token such as ``<|end|>``, or None when it has none."""
        ...
