"""The ``byte`` tokenizer as a Hugging Face ``tokenizer.json``: what an export writes.

A byte-level BPE with no merges: id ``b`` is byte ``b`` (spelled with the GPT-2 byte
alphabet the ``ByteLevel`` pre-tokenizer uses), then the special tokens at ``256 + i``, so
ordinary text encodes to exactly the ids :class:`~theseus.data.tokenizers.byte.ByteTokenizer`
gives, and ``transformers``' ``PreTrainedTokenizerFast`` reads it.
"""

from __future__ import annotations

from theseus.data.tokenizers.base import SPECIAL_TOKENS


def byte_alphabet() -> dict[int, str]:
    """Byte -> the character ``ByteLevel`` spells it with: printable Latin-1 bytes as
    themselves, the others as ``chr(256 + n)`` in byte order."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    spelled: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            spelled[byte] = chr(byte)
        else:
            spelled[byte] = chr(256 + shifted)
            shifted += 1
    return spelled


def byte_tokenizer_json() -> str:
    """The ``tokenizer.json`` text of the byte tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: byte for byte, char in byte_alphabet().items()}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tk.to_str()
