"""The problems of ``<model>/train/grpo``: the embedded addition task, or a jsonl file.

Addition: training problems and held-out problems are drawn from two streams of
``training.seed``; a held-out problem never appears among the training ones. Jsonl: one
object per line with a question and a reference answer (GSM8K's ``question``/``answer``
with ``grpo.prompt_field=question``); the last ``grpo.eval_prompts`` lines are held out.
Each step's prompts are a pure function of (seed, step), so a resumed run asks the same
questions.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.errors import ConfigError


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str


def _problem(rng: random.Random, max_digits: int) -> tuple[int, int]:
    top = 10**max_digits
    return rng.randrange(top), rng.randrange(top)


def addition_task(seed: int, max_digits: int, problems: int, held_out: int):
    """``(training problems, held-out problems)``: disjoint, as long as the operand space
    allows (the held-out set is drawn first and may be smaller when it is nearly exhausted)."""
    space = 10 ** (2 * max_digits)
    held_rng = random.Random(f"grpo-held-out-{seed}")
    held: dict[tuple[int, int], None] = {}
    for _ in range(held_out * 20):
        if len(held) >= min(held_out, space // 2):
            break
        held.setdefault(_problem(held_rng, max_digits))
    train_rng = random.Random(f"grpo-train-{seed}")
    train: list[tuple[int, int]] = []
    for _ in range(problems * 20):
        if len(train) >= problems:
            break
        pair = _problem(train_rng, max_digits)
        if pair not in held:
            train.append(pair)

    def as_problems(pairs):
        return [Problem(f"What is {a}+{b}?", str(a + b)) for a, b in pairs]

    return as_problems(train), as_problems(list(held))


def jsonl_task(path: str, prompt_field: str, answer_field: str, held_out: int):
    """``(training problems, held-out problems)`` of a jsonl file: its last ``held_out``
    lines are held out."""
    if not Path(path).is_file():
        raise ConfigError(f"grpo.prompts_file={path}: no such file")
    problems = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                problems.append(Problem(str(row[prompt_field]), str(row[answer_field])))
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigError(
                    f"{path}:{number}: expected a JSON object with {prompt_field!r} and "
                    f"{answer_field!r} ({error})"
                ) from error
    if len(problems) <= held_out:
        raise ConfigError(
            f"{path} has {len(problems)} problems: more than grpo.eval_prompts={held_out} "
            "are needed (the last ones are held out)"
        )
    return problems[:-held_out], problems[-held_out:]


def load_task(grpo: Any, seed: int):
    """The run's ``(training problems, held-out problems)``."""
    if grpo.task == "jsonl":
        return jsonl_task(
            grpo.prompts_file, grpo.prompt_field, grpo.answer_field, grpo.eval_prompts
        )
    return addition_task(seed, grpo.max_digits, grpo.problems, grpo.eval_prompts)


def step_prompts(seed: int, step: int, count: int, available: int) -> list[int]:
    """Indices of the ``count`` training problems asked at ``step`` (a function of both)."""
    rng = np.random.default_rng([seed, step, 7])
    return rng.choice(available, size=count, replace=count > available).tolist()


def row_seed(seed: int, step: int, problem: int, generation: int) -> int:
    """The sampling seed of one completion: a function of (seed, step, problem, generation)."""
    return int(np.random.SeedSequence([seed, step, problem, generation]).generate_state(1)[0])
