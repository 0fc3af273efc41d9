"""A byte-level BPE ``tokenizer.json`` encoded by tiktoken, when that gives the same ids.

Hugging Face ``tokenizers`` and tiktoken run the same algorithm on a byte-level BPE: split
the text at added (special) tokens, cut the rest with the GPT-2 regular expression, map
each piece to bytes, and merge adjacent parts lowest rank first. tiktoken ranks a pair by
the id of the token the two parts make; ``tokenizers`` by the merge's position in the merge
list. A trained BPE numbers the token each merge makes in merge order, so the two orders
agree, and tiktoken's Rust encoder is several times faster per core.

:func:`tiktoken_equivalent` builds the tiktoken encoding only for the structure where this
holds and says why not otherwise: no normalizer, the ``ByteLevel`` pre-tokenizer with its
regular expression and no prefix space, a BPE model without dropout, unknown token,
subword prefix or suffix, byte fallback, merges that make tokens in increasing id order,
and added tokens matched as plain strings (no stripping, none a prefix of another, so the
leftmost match is the same in both). ``tests/data/test_fast_bpe.py`` checks identical ids on
the corpus and adversarial text.
"""

from __future__ import annotations

import json
from typing import Any

# The GPT-2 pattern, as tiktoken writes it (``tokenizers``' ByteLevel uses the same one).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_decoder() -> dict[str, int]:
    """The byte-level alphabet: the printable character standing for each byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for value in range(256):
        if value not in printable:
            printable.append(value)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _merges(model: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for merge in model.get("merges", []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        out.append((left, right))
    return out


def _structure_problem(data: dict[str, Any]) -> str:
    """Why ``data`` is not a plain byte-level BPE ("" when it is)."""
    if data.get("normalizer") is not None:
        return "it has a normalizer"
    pre = data.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        return f"its pre-tokenizer is {pre.get('type')}, not ByteLevel with its regex"
    if pre.get("add_prefix_space"):
        return "its ByteLevel pre-tokenizer adds a prefix space"
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        return f"its model is {model.get('type')}, not BPE"
    for key in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"its BPE model sets {key}"
    if model.get("byte_fallback") or model.get("fuse_unk"):
        return "its BPE model uses byte fallback"
    for token in data.get("added_tokens") or []:
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            return f"added token {token.get('content')!r} strips or matches whole words"
    added = [t["content"] for t in data.get("added_tokens") or []]
    for a in added:
        for b in added:
            if a != b and b.startswith(a):
                return f"added token {a!r} is a prefix of {b!r}"
    return ""


def tiktoken_equivalent(json_text: str) -> tuple[Any, str]:
    """(a tiktoken ``Encoding`` giving the ids of this ``tokenizer.json``, "") or
    (None, why there is none)."""
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - a dependency of theseus-data
        return None, "tiktoken is not installed"
    data = json.loads(json_text)
    problem = _structure_problem(data)
    if problem:
        return None, problem
    model = data["model"]
    vocab: dict[str, int] = model["vocab"]
    decode = byte_decoder()
    added = {t["content"]: int(t["id"]) for t in data.get("added_tokens") or []}
    added_ids = set(added.values())

    def as_bytes(token: str) -> bytes | None:
        try:
            return bytes(decode[c] for c in token)
        except KeyError:
            return None

    ranks: dict[bytes, int] = {}
    for char, value in decode.items():
        if char not in vocab:
            return None, f"the byte {value} has no token"
        ranks[bytes([value])] = vocab[char]
    previous = -1
    for left, right in _merges(model):
        made = left + right
        if made not in vocab:
            return None, f"merge {left!r} + {right!r} makes no token"
        token_id = vocab[made]
        if token_id <= previous:
            return None, "its merges do not make tokens in increasing id order"
        previous = token_id
        raw = as_bytes(made)
        if raw is None or raw in ranks:
            return None, f"token {made!r} is made twice or is not byte-level"
        ranks[raw] = token_id
    unreachable = [
        t for t, i in vocab.items() if i not in added_ids and (as_bytes(t) or b"") not in ranks
    ]
    if unreachable and model.get("ignore_merges"):
        return None, f"token {unreachable[0]!r} is made by no merge (and ignore_merges is set)"
    specials = {content: token_id for content, token_id in added.items()}
    encoding = tiktoken.Encoding(
        "theseus-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )
    return encoding, ""
