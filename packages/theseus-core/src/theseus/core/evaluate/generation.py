"""Generation scored by exact match: greedy answers compared with the reference.

``addition`` (synthetic a+b in the chat template the SFT data uses) also reports
``answer_logprob``, the mean log-likelihood of the reference answer, which moves before
exact match does. ``gsm8k`` reads the number after ``####`` (else the last number).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
from theseus.core.addition import problems as held_out_problems
from theseus.core.addition import question as addition_question
from theseus.core.evaluate import sources
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.target import EvalTarget
from theseus.core.plugins import registries

log = logging.getLogger(__name__)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def greedy(target: EvalTarget, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
    """Greedy continuations of each prompt, decoded by the plugin that generates for the
    model (``theseus_generate``; theseus-models' KV-cache decoding for ``Decoder`` models)."""

    hook = registries().hook
    stops = [target.tokenizer.eos_id]
    end = target.tokenizer.special_id("<|end|>")  # the chat template's end of turn, if any
    if end is not None:
        stops.append(end)
    texts: list[str] = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
    for start in range(0, len(order), target.batch_size):
        picked = order[start : start + target.batch_size]
        batch = [prompts[i][-(target.max_len - 1) :] for i in picked]
        room = target.max_len - max(len(p) for p in batch)
        outputs = hook.theseus_generate(
            model=target.model,
            prompts=batch,
            max_new_tokens=max(1, min(max_new_tokens, room)),
            stop_tokens=stops,
            pad_id=target.pad_id,
        )
        if outputs is None:
            raise EvaluationError(
                f"no installed plugin generates with {type(target.model).__name__} (it needs "
                "init_cache/decode, theseus.core.model.Decoder, and theseus-models installed)"
            )
        for i, ids in zip(picked, outputs, strict=True):
            ids = [t for t in ids if t not in stops]
            texts[i] = target.tokenizer.decode(ids)
    return texts


# ----------------------------------------------------------------------------- addition


def addition_problems(config: Any) -> list[tuple[str, str]]:
    """Held-out problems (``theseus.core.addition``: none is in the ``addition`` training
    sets), or with ``split=training`` problems those sets draw from."""
    held_out = config.split == "held-out"
    pairs = held_out_problems(config.seed, config.max_digits, config.num_examples, held_out)
    return [(addition_question(a, b), str(a + b)) for a, b in pairs]


def addition(config: Any, target: EvalTarget) -> dict[str, float]:
    problems = addition_problems(config)
    caps = [n for n in (config.limit, int(target.limit)) if n > 0]
    problems = problems[: min(caps)] if caps else problems
    prompts = [target.chat_prompt(question) for question, _ in problems]
    answers = greedy(target, prompts, config.max_new_tokens)
    end = target.marker("<|end|>")
    forced = target.scorer.loglikelihood(
        [
            (p, list(target.tokenizer.encode(a)) + end)
            for p, (_, a) in zip(prompts, problems, strict=True)
        ]
    )
    matches = [
        given.strip() == answer for given, (_, answer) in zip(answers, problems, strict=True)
    ]
    shown = list(zip(problems, answers, matches, strict=True))[: config.shown]
    for (asked, answer), given, right in shown:  # what a person can check at a glance
        log.info("  %s -> %s (%s)", asked, given.strip() or "''", "right" if right else answer)
    return {
        "exact_match": float(np.mean(matches)),
        "answer_logprob": float(np.mean([lp for lp, _, _ in forced])),
        "answer_greedy": float(np.mean([g for _, g, _ in forced])),
        "examples": len(problems),
    }


# ----------------------------------------------------------------------------- gsm8k


def _number(text: str) -> str | None:
    if "####" in text:
        text = text.split("####")[-1]
    found = NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "").rstrip(".")
    return value[:-2] if value.endswith(".0") else value


def gsm8k(config: Any, target: EvalTarget) -> dict[str, float]:
    rows = sources.examples("gsm8k", config, target.limit)
    questions = [str(sources.field("gsm8k", r, "question")) for r in rows]
    references = [_number(str(sources.field("gsm8k", r, "answer"))) for r in rows]
    encode = target.tokenizer.encode
    if config.chat:
        prompts = [target.chat_prompt(q) for q in questions]
    else:
        prompts = [list(encode(f"Question: {q}\nAnswer:")) for q in questions]
    outputs = greedy(target, prompts, config.max_new_tokens)
    given = [_number(re.split(r"\n\n|Question:", text)[0]) for text in outputs]
    matches = [g is not None and g == r for g, r in zip(given, references, strict=True)]
    return {"exact_match": float(np.mean(matches)), "examples": len(rows)}
