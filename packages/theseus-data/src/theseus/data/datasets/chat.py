"""Chat datasets: ``alpaca``-style local jsonl and the synthetic ``addition`` set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from theseus.core import addition
from theseus.core.components import option
from theseus.data.datasets.base import Dataset, Message
from theseus.data.datasets.files import expand, read_jsonl


@dataclass
class AlpacaConfig:
    files: str = option(help="comma-separated globs of jsonl files (instruction, input, output)")
    max_documents: int = option(0, "use at most this many examples (0: all)", ge=0)


class Alpaca(Dataset):
    """``{"instruction", "input", "output"}`` lines -> a user turn and an assistant turn."""

    kind = "chat"

    def records(self) -> Iterator[list[Message]]:
        skips = self.skips

        def examples() -> Iterator[list[Message]]:
            for path in expand(self.config.files):
                for number, row in read_jsonl(path, skips):
                    instruction, output = row.get("instruction"), row.get("output")
                    if not isinstance(instruction, str) or not isinstance(output, str):
                        skips.bad(
                            f"{path}:{number}: needs string fields 'instruction' and 'output'"
                        )
                        continue
                    extra = row.get("input") or ""
                    prompt = f"{instruction}\n\n{extra}" if extra else instruction
                    yield [
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": output},
                    ]

        return self.limit(examples())


@dataclass
class AdditionConfig:
    num_examples: int = option(5000, "how many problems to generate", ge=1)
    max_digits: int = option(2, "operands have 1 to this many digits", ge=1)
    seed: int = option(0, "generator seed (same seed, same examples)", ge=0)


def addition_problems(seed: int, max_digits: int, count: int) -> Iterator[tuple[int, int]]:
    """The operands of the addition problems, drawn from ``seed`` (shared by the chat
    set and the preference set built on it): never a problem the ``addition`` evaluation
    holds out (``theseus.core.addition``)."""
    return addition.problems(seed, max_digits, count, evaluation=False)


def addition_question(a: int, b: int) -> str:
    return addition.question(a, b)


class Addition(Dataset):
    """``"What is 12+34?"`` -> ``"46"``, generated from a seed."""

    kind = "chat"

    def records(self) -> Iterator[list[Message]]:
        config = self.config
        for a, b in addition_problems(config.seed, config.max_digits, config.num_examples):
            yield [
                {"role": "user", "content": addition_question(a, b)},
                {"role": "assistant", "content": str(a + b)},
            ]
