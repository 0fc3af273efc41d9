"""The built-in reward functions (registered by ``theseus_register_rewards`` in
``theseus.core.builtin``): ``reward(prompts, completions, **fields) -> list[float]``.

``answer`` is the task's reference answer of each row. Completions arrive decoded, without
the stop token; surrounding whitespace never counts.
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
DIGITS = re.compile(r"-?\d+")


def exact_answer(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
    """1.0 when the completion, stripped, is the answer exactly; else 0.0."""
    answers = fields["answer"]
    return [float(c.strip() == str(a).strip()) for c, a in zip(completions, answers, strict=True)]


def digit_match(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
    """Partial credit: the fraction of the answer's digits that the stripped completion has
    at the same place counted from the right (units with units), divided by the longer of
    the two lengths, so extra or missing digits cost; 1.0 only for the exact answer. A
    completion that is not an integer scores 0.0."""
    answers = fields["answer"]
    scores = []
    for completion, answer in zip(completions, answers, strict=True):
        got, want = completion.strip(), str(answer).strip()
        if DIGITS.fullmatch(got) is None:
            scores.append(0.0)
            continue
        same = sum(a == b for a, b in zip(reversed(got), reversed(want), strict=False))
        scores.append(same / max(len(got), len(want)))
    return scores


def digits_only(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
    """1.0 when the completion, stripped, is an integer and nothing else (the answer format
    of the addition task); else 0.0."""
    return [float(DIGITS.fullmatch(c.strip()) is not None) for c in completions]


def final_number(text: str) -> str | None:
    """The number after the last ``####`` (GSM8K's answer marker), else the last number in
    the text; commas dropped and a trailing ``.0`` removed. ``None`` when there is none."""
    if "####" in text:
        text = text.rsplit("####", 1)[-1]
    found = NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "").rstrip(".")
    return value[:-2] if value.endswith(".0") else value


def hash_answer(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
    """1.0 when :func:`final_number` of the completion equals that of the answer."""
    answers = fields["answer"]
    return [
        float(final_number(c) is not None and final_number(c) == final_number(str(a)))
        for c, a in zip(completions, answers, strict=True)
    ]
