"""Fixtures of the evaluation tests: a tiny GPT pretrained on python-stdlib through the real
CLI, and local benchmark files in the public schemas, built from that corpus."""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

import pytest

# The hub is unreachable here: fail fast instead of retrying (read when `datasets` loads).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="theseus-hf-cache-"))

from theseus.core.data.api import find_dataset

from tests.train.conftest import TINY, TINY_MODEL, run_cli  # noqa: E402

RUN = "pre"
STEPS = 400
#: Fine-tuning the tiny GPT on one-digit addition (byte tokens); each test adds its steps
#: and evaluation cadence.
ADDITION_SFT = [
    *TINY_MODEL, "training.global_batch_size=16", "optimizer.learning_rate=0.003",
    "data.dataset=addition", "data.tokenizer=byte",
    "data.dataset_options={max_digits: 1, num_examples: 1000}", "data.num_workers=1",
    "data.validation_fraction=0.05", "eval.batches=2",
    "checkpoint.every=150", "logging.every=50", "logging.progress=false",
]  # fmt: skip


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory) -> Path:
    """A root with run ``pre``: 400 steps (checkpoints at 200 and 400), val loss ~4.5."""
    root = tmp_path_factory.mktemp("eval-root")
    result = run_cli(
        root, "run", "gpt/train/pretrain", *TINY, f"training.total_steps={STEPS}",
        "checkpoint.every=200", "eval.every=0", "--name", RUN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="session")
def opened(pretrained):
    """The checkpoint of step 400 as an evaluation target, and the run's moment."""
    from theseus.core.evaluate.target import checkpoint_target

    target, source = checkpoint_target(str(pretrained), RUN)
    assert source == {"run": RUN, "step": STEPS}
    return target


def corpus_lines(root: Path, tokenizer) -> list[str]:
    """Lines of the training split (decoded), long enough to split, without brackets."""
    import numpy as np
    from theseus.core.data.reader import TokenizedDataset

    dataset = TokenizedDataset(find_dataset(root, "python-stdlib"))
    ids = np.concatenate([s.tokens for s in dataset.splits["train"]]).tolist()
    text = tokenizer.decode(ids)
    return [
        line.strip()
        for line in text.splitlines()
        if len(line.split()) >= 6 and not any(c in line for c in "<>[]|")
    ]


def word_order_questions(root: Path, tokenizer, n: int, seed: int = 0) -> list[dict]:
    """``{context, ending, distractors}``: distractors reorder the ending's tokens, so only a
    model that learned the corpus's token order can tell the true ending apart."""
    rng = random.Random(seed)
    lines = corpus_lines(root, tokenizer)
    out = []
    for line in rng.sample(lines, 4 * n):
        words = line.split()
        half = len(words) // 2
        ending = " ".join(words[half:])
        ids = tokenizer.encode(" " + ending)
        distractors: list[str] = []
        for _ in range(50):
            shuffled = ids[:]
            rng.shuffle(shuffled)
            text = tokenizer.decode(shuffled).strip()
            if text and text != ending and text not in distractors:
                distractors.append(text)
            if len(distractors) == 3:
                break
        if len(distractors) == 3:
            out.append(
                {"context": " ".join(words[:half]), "ending": ending, "distractors": distractors}
            )
        if len(out) == n:
            break
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def placed(questions: list[dict], seed: int) -> list[tuple[dict, int, list[str]]]:
    """``(question, label, options)`` per question: its true ending inserted among its
    distractors at a ``label`` drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    out = []
    for q in questions:
        label = rng.randrange(4)
        options = q["distractors"][:]
        options.insert(label, q["ending"])
        out.append((q, label, options))
    return out


def hellaswag_rows(questions: list[dict], seed: int = 1) -> list[dict]:
    return [{"activity_label": "Python", "ctx_a": q["context"], "ctx_b": "",
             "endings": endings, "label": str(label)} for q, label, endings in placed(questions, seed)]  # fmt: skip


def arc_rows(questions: list[dict], seed: int = 2) -> list[dict]:
    return [{"id": f"q{i}", "question": q["context"],
             "choices": {"text": texts, "label": list("ABCD")}, "answerKey": "ABCD"[label]}
            for i, (q, label, texts) in enumerate(placed(questions, seed))]  # fmt: skip


def mmlu_rows(questions: list[dict], seed: int = 3) -> list[dict]:
    return [{"question": f"How does this line end? {q['context']}", "subject": "python_code",
             "choices": choices, "answer": answer} for q, answer, choices in placed(questions, seed)]  # fmt: skip


@pytest.fixture(scope="session")
def bench_files(pretrained, opened, tmp_path_factory) -> dict[str, Path]:
    """Local jsonl for hellaswag, arc and mmlu (40 questions each, public schemas)."""
    folder = tmp_path_factory.mktemp("bench")
    questions = word_order_questions(pretrained, opened.tokenizer, 40)
    assert len(questions) == 40
    return {
        "hellaswag": write_jsonl(folder / "hellaswag.jsonl", hellaswag_rows(questions)),
        "arc": write_jsonl(folder / "arc.jsonl", arc_rows(questions)),
        "mmlu": write_jsonl(folder / "mmlu.jsonl", mmlu_rows(questions)),
    }


def untrained(target, run: str = RUN, step: int = STEPS):
    """The same model at its initialisation (the run's seed), as a target."""
    import dataclasses

    from theseus.core.inspect.timetravel import open_step

    setup = open_step(target.root, run, step).setup
    model = setup.model(setup.init_state().params)
    return dataclasses.replace(target, model=model, _scorer=None)
