"""The special tokens every theseus vocabulary knows, and the digest that names a text.

A leaf: the tokenizers and the chat template both read it, and it reads neither."""

from __future__ import annotations

import hashlib

EOS = "<|endoftext|>"
PAD = "<|pad|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
END_OF_TURN = "<|end|>"
SPECIAL_TOKENS = [EOS, PAD, *ROLE_TOKENS.values(), END_OF_TURN]


def sha256_text(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
