"""Preference datasets (``kind = "preference"``): a prompt, a chosen and a rejected answer.

A record is ``{"prompt": ..., "chosen": ..., "rejected": ...}``. Each field is a string
(the prompt: one user turn; chosen and rejected: one assistant turn) or a list of chat
messages (the prompt: the conversation up to and including its last user turn; chosen and
rejected: the assistant message(s) answering it). A record without ``prompt`` whose chosen
and rejected are whole conversations takes their shared turns, up to the last user turn,
as its prompt (the "implicit prompt" form of many published sets).

Tokenization makes two chat documents of each record, stored one after the other (the
train/validation split keeps them together): prompt + chosen, then prompt + rejected,
each with the assistant-only loss mask of chat data. ``metadata.json`` records
``"kind": "preference"``; the trainer reads such data with the ``pairs`` layout only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from theseus.core.components import option
from theseus.data.datasets.base import Dataset, Message
from theseus.data.datasets.chat import addition_problems, addition_question
from theseus.data.datasets.files import expand, read_jsonl
from theseus.data.errors import BadRecordError

ROLES = ("system", "user", "assistant")
FIELDS = ("prompt", "chosen", "rejected")


def _messages(value: Any, field: str, default_role: str) -> list[Message]:
    """``value`` as a list of ``{"role", "content"}`` messages (a string is one turn)."""
    if isinstance(value, str):
        return [{"role": default_role, "content": value}]
    if not isinstance(value, list) or not value:
        raise BadRecordError(f"{field!r} must be a string or a non-empty list of messages")
    out = []
    for message in value:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in ROLES or not isinstance(content, str):
            raise BadRecordError(
                f"{field!r} holds {message!r}: a message is {{'role': one of {ROLES}, "
                "'content': a string}"
            )
        out.append({"role": role, "content": content})
    return out


def _split_implicit(chosen: list[Message], rejected: list[Message]) -> int:
    """How many leading turns chosen and rejected share, ending at a user turn."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    while shared and chosen[shared - 1]["role"] != "user":
        shared -= 1
    return shared


def normalize(record: Any) -> dict[str, list[Message]]:
    """``{"prompt", "chosen", "rejected"}`` as message lists, checked: the prompt ends with
    a user turn, chosen and rejected are assistant turns. Raises :class:`BadRecordError`."""
    if not isinstance(record, dict):
        raise BadRecordError(f"a preference record is a dict with keys {FIELDS}, not {record!r}")
    missing = [f for f in ("chosen", "rejected") if f not in record]
    if missing:
        raise BadRecordError(f"a preference record needs {', '.join(map(repr, missing))}")
    chosen = _messages(record["chosen"], "chosen", "assistant")
    rejected = _messages(record["rejected"], "rejected", "assistant")
    if "prompt" in record:
        prompt = _messages(record["prompt"], "prompt", "user")
    else:  # implicit prompt: the shared conversation before the answers
        shared = _split_implicit(chosen, rejected)
        if not shared:
            raise BadRecordError(
                "a preference record without 'prompt' needs chosen and rejected "
                "conversations that share their turns up to a user turn"
            )
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    if prompt[-1]["role"] != "user":
        raise BadRecordError(
            f"'prompt' ends with a {prompt[-1]['role']!r} turn; it must end with a user turn"
        )
    for field, answer in (("chosen", chosen), ("rejected", rejected)):
        if not answer or any(m["role"] != "assistant" for m in answer):
            raise BadRecordError(f"{field!r} must be one or more assistant turns")
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def record_text_bytes(record: Any) -> int:
    """Characters of text in a record (prompt once, both answers)."""
    pair = normalize(record)
    return sum(len(m["content"]) for field in FIELDS for m in pair[field])


class PreferenceDataset(Dataset):
    """Base class of preference datasets: ``records()`` yields preference records."""

    kind = "preference"

    def texts(self) -> Iterator[str]:
        for record in self.records():
            pair = normalize(record)
            for field in FIELDS:
                for message in pair[field]:
                    yield message["content"]


# ----------------------------------------------------------------------------- local files
@dataclass
class PreferenceJsonlConfig:
    files: str = option(help="comma-separated globs of jsonl files (prompt, chosen, rejected)")
    max_documents: int = option(0, "use at most this many pairs (0: all)", ge=0)


class PreferenceJsonl(PreferenceDataset):
    """Lines ``{"prompt", "chosen", "rejected"}``: strings or chat-format message lists."""

    def records(self) -> Iterator[dict[str, list[Message]]]:
        skips = self.skips

        def pairs() -> Iterator[dict[str, list[Message]]]:
            for path in expand(self.config.files):
                for number, row in read_jsonl(path, skips):
                    try:
                        yield normalize(row)
                    except BadRecordError as error:
                        skips.bad(f"{path}:{number}: {error}")

        return self.limit(pairs())


# ----------------------------------------------------------------------------- addition
@dataclass
class AdditionPreferenceConfig:
    num_examples: int = option(2000, "how many problems to generate", ge=1)
    max_digits: int = option(2, "operands have 1 to this many digits", ge=1)
    seed: int = option(
        1,
        "generator seed: the problems of `addition` with the same seed (by default another "
        "draw than the SFT set's)",
        ge=0,
    )
    max_documents: int = option(0, "use at most this many pairs (0: all)", ge=0)


def carry_dropped(a: int, b: int) -> int:
    """``a + b`` with every carry forgotten (each column's digit sum mod 10)."""
    out, place = 0, 1
    while a or b:
        out += (a % 10 + b % 10) % 10 * place
        a, b, place = a // 10, b // 10, place * 10
    return out


def digit_slip(n: int, rng: random.Random) -> int:
    """``n`` with one of its digits off by one (never a new leading zero)."""
    width = len(str(n))
    position = rng.randrange(width)
    place = 10**position
    digit = n // place % 10
    step = rng.choice((-1, 1))
    lowest = 1 if position == width - 1 and width > 1 else 0
    if not lowest <= digit + step <= 9:
        step = -step
    return n + step * place


def wrong_sum(a: int, b: int, rng: random.Random) -> int:
    """A plausible mistake: the carries dropped (when there is one), else a digit slip."""
    if rng.random() < 0.5:
        wrong = carry_dropped(a, b)
        if wrong != a + b:
            return wrong
    return digit_slip(a + b, rng)


class AdditionPreference(PreferenceDataset):
    """The ``addition`` problems: chosen the right sum (as the SFT set writes it),
    rejected a plausible wrong one; both drawn from ``seed``."""

    def records(self) -> Iterator[dict[str, str]]:
        config = self.config
        mistakes = random.Random(f"addition-preference:{config.seed}")

        def pairs() -> Iterator[dict[str, str]]:
            for a, b in addition_problems(config.seed, config.max_digits, config.num_examples):
                yield {
                    "prompt": addition_question(a, b),
                    "chosen": str(a + b),
                    "rejected": str(wrong_sum(a, b, mistakes)),
                }

        return self.limit(pairs())
