"""The problems of ``<model>/train/grpo``: the embedded addition task, or a jsonl file.

Addition: training and held-out problems are drawn from two streams of ``training.seed``,
on the two sides of the task's one split, so a held-out problem is in no training set (SFT,
DPO or GRPO). Jsonl: one
object per line with a question and a reference answer (GSM8K's ``question``/``answer``
with ``grpo.prompt_field=question``); the last ``grpo.eval_prompts`` lines are held out.
Each step's prompts are a pure function of (seed, step), so a resumed run asks the same
questions.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core import addition as split
from theseus.core.errors import ConfigError


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str


def addition_task(seed: int, max_digits: int, problems: int, held_out: int):
    """``(training problems, held-out problems)`` on the two sides of the addition task's one
    split (:mod:`theseus.core.addition`), the split the SFT chats, the preference pairs and
    the ``addition`` evaluation use: a held-out problem is in none of their training sets
    either. Held-out problems are distinct (fewer when the operand space has too few: one
    digit has 10); training problems may repeat, as draws."""
    draws = split.problems(f"grpo-held-out-{seed}", max_digits, held_out * 20, evaluation=True)
    held = list(dict.fromkeys(itertools.islice(draws, held_out * 20)))[:held_out]
    train = list(split.problems(f"grpo-train-{seed}", max_digits, problems, evaluation=False))

    def as_problems(pairs):
        return [Problem(split.question(a, b), str(a + b)) for a, b in pairs]

    return as_problems(train), as_problems(held)


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
