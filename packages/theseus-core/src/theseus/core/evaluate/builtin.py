"""The built-in evaluations (core's plugin registers them in ``theseus_register_evaluations``)."""

from __future__ import annotations

from collections.abc import Callable

from theseus.core.components import Component
from theseus.core.evaluate import configs as ec

EV = "theseus.core.evaluate"


def register_evaluations(register: Callable[[Component], None]) -> None:
    register(
        Component(
            "val-ppl",
            ec.PerplexityConfig,
            f"{EV}.perplexity:run",
            "perplexity and bits-per-byte on the run's validation split",
        )
    )
    register(
        Component(
            "hellaswag",
            ec.choice_config("Rowan/hellaswag", "", "validation"),
            f"{EV}.choice:hellaswag",
            "HellaSwag: pick the likeliest ending (acc, acc_norm)",
        )
    )
    register(
        Component(
            "arc",
            ec.choice_config("allenai/ai2_arc", "ARC-Easy", "test"),
            f"{EV}.choice:arc",
            "ARC (Easy by default; hf_name=ARC-Challenge): likeliest answer",
        )
    )
    register(
        Component(
            "mmlu",
            ec.choice_config("cais/mmlu", "all", "test"),
            f"{EV}.choice:mmlu",
            "MMLU: likeliest answer letter (zero-shot)",
        )
    )
    register(
        Component(
            "gsm8k",
            ec.GSM8KConfig,
            f"{EV}.generation:gsm8k",
            "GSM8K: greedy answer, exact match of the final number",
        )
    )
    register(
        Component(
            "addition",
            ec.AdditionEvalConfig,
            f"{EV}.generation:addition",
            "synthetic a+b in the chat template: exact match and answer log-likelihood",
        )
    )
    register(
        Component(
            "lm-eval",
            ec.LmEvalConfig,
            f"{EV}.harness:run",
            "lm-evaluation-harness tasks by name (pip install 'theseus-core[lm-eval]')",
        )
    )
