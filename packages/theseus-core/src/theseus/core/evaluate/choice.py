"""Multiple choice by log-likelihood: the choice the model finds likeliest is its answer.

``acc`` compares summed log-likelihoods; ``acc_norm`` divides each by the choice's length
in characters, not counting the space that joins it to the context (lm-evaluation-harness's
normalisation, checked against it in tests/evaluate/test_lm_eval.py), which removes the
bias to short choices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from theseus.core.evaluate import sources
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.target import EvalTarget


@dataclass
class Question:
    context: str
    choices: list[str]  # continuations, each with its leading space
    answer: int


def score(questions: list[Question], target: EvalTarget) -> dict[str, float]:
    for question in questions:
        if not 0 <= question.answer < len(question.choices):
            raise EvaluationError(
                f"answer {question.answer} is out of range for {len(question.choices)} choices "
                f"(context {question.context[:40]!r})"
            )
    encode = target.tokenizer.encode
    requests = []
    for question in questions:
        context = list(encode(question.context))
        for choice in question.choices:
            requests.append((context, list(encode(choice))))
    results = target.scorer.loglikelihood(requests)
    correct = correct_norm = 0
    offset = 0
    for question in questions:
        n = len(question.choices)
        logps = np.array([results[offset + i][0] for i in range(n)])
        lengths = np.array([max(1, len(_unjoined(c))) for c in question.choices])
        correct += int(np.argmax(logps) == question.answer)
        correct_norm += int(np.argmax(logps / lengths) == question.answer)
        offset += n
    return {
        "acc": correct / len(questions),
        "acc_norm": correct_norm / len(questions),
        "examples": len(questions),
    }


def _unjoined(choice: str) -> str:
    """The choice as the harness counts it: without the leading space joining it."""
    return choice[1:] if choice.startswith(" ") else choice


# ----------------------------------------------------------------------------- schemas


def _hellaswag_text(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_question(row: dict) -> Question:
    """Rowan/hellaswag: ``activity_label``, ``ctx_a``, ``ctx_b``, ``endings``, ``label``."""
    f = lambda key: sources.field("hellaswag", row, key)  # noqa: E731
    context = f"{f('activity_label')}: {f('ctx_a')} {str(f('ctx_b')).capitalize()}"
    endings = [" " + _hellaswag_text(e) for e in f("endings")]
    return Question(_hellaswag_text(context), endings, int(f("label")))


def arc_question(row: dict) -> Question:
    """allenai/ai2_arc: ``question``, ``choices: {text, label}``, ``answerKey``."""
    f = lambda key: sources.field("arc", row, key)  # noqa: E731
    choices = f("choices")
    labels = [str(label) for label in choices["label"]]
    if str(f("answerKey")) not in labels:
        raise EvaluationError(f"arc: answerKey {f('answerKey')!r} is not one of {labels}")
    return Question(
        f"Question: {f('question')}\nAnswer:",
        [f" {text}" for text in choices["text"]],
        labels.index(str(f("answerKey"))),
    )


LETTERS = "ABCDEFGHIJ"


def mmlu_question(row: dict) -> Question:
    """cais/mmlu: ``question``, ``subject``, ``choices`` (4 texts), ``answer`` (0-3)."""
    f = lambda key: sources.field("mmlu", row, key)  # noqa: E731
    choices = list(f("choices"))
    subject = str(row.get("subject", "")).replace("_", " ")
    lines = [f"The following are multiple choice questions (with answers) about {subject}.\n"]
    lines.append(str(f("question")).strip())
    lines += [f"{LETTERS[i]}. {text}" for i, text in enumerate(choices)]
    lines.append("Answer:")
    return Question(
        "\n".join(lines), [f" {LETTERS[i]}" for i in range(len(choices))], int(f("answer"))
    )


def _runner(name: str, build: Any) -> Any:
    def run(config: Any, target: EvalTarget) -> dict[str, float]:
        rows = sources.examples(name, config, target.limit)
        return score([build(row) for row in rows], target)

    run.__name__ = name
    return run


hellaswag = _runner("hellaswag", hellaswag_question)
arc = _runner("arc", arc_question)
mmlu = _runner("mmlu", mmlu_question)
