"""Multiple choice by log-likelihood on local jsonl in the HellaSwag, ARC and MMLU schemas."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from theseus.core.evaluate import choice
from theseus.core.evaluate.configs import choice_config
from theseus.core.evaluate.errors import EvaluationError

from tests.evaluate.conftest import untrained

NO_MODEL = SimpleNamespace(limit=0)  # rows are read (and refused) before any model is used


def config(path, **extra):
    return choice_config("", "", "")(files=str(path), **extra)


@pytest.fixture(scope="module")
def scores(opened, bench_files):
    blank = untrained(opened)
    out = {}
    for name in ("hellaswag", "arc"):
        run = getattr(choice, name)
        out[name] = (run(config(bench_files[name]), opened), run(config(bench_files[name]), blank))
    return out


@pytest.mark.parametrize("name", ["hellaswag", "arc"])
def test_a_trained_model_tells_true_endings_from_reordered_ones(scores, name):
    trained, blank = scores[name]
    assert trained["examples"] == blank["examples"] == 40
    # the distractors hold the same tokens in another order: only learned order helps
    assert trained["acc"] >= 0.7, trained
    assert trained["acc"] >= blank["acc"] + 0.4, (trained, blank)
    assert trained["acc_norm"] >= 0.7


def test_mmlu_scores_answer_letters(opened, bench_files):
    result = choice.mmlu(config(bench_files["mmlu"], limit=12), opened)
    assert result["examples"] == 12 and 0.0 <= result["acc"] <= 1.0


def test_prompts_follow_each_benchmark_format():
    hs = choice.hellaswag_question({"activity_label": "Cooking", "ctx_a": "He cuts onions.",
                                    "ctx_b": "then he", "endings": ["fries them.", "sings [header] loudly."],
                                    "label": "0"})  # fmt: skip
    assert hs.context == "Cooking: He cuts onions. Then he"
    assert hs.choices == [" fries them.", " sings loudly."] and hs.answer == 0
    arc = choice.arc_question({"question": "What is 2+2?", "answerKey": "2",
                               "choices": {"text": ["3", "4"], "label": ["1", "2"]}})  # fmt: skip
    assert arc.context == "Question: What is 2+2?\nAnswer:" and arc.choices == [" 3", " 4"]
    assert arc.answer == 1
    mmlu = choice.mmlu_question({"question": "Q?", "subject": "high_school_math",
                                 "choices": ["a", "b", "c", "d"], "answer": 3})  # fmt: skip
    assert mmlu.context == (
        "The following are multiple choice questions (with answers) about high school math.\n\n"
        "Q?\nA. a\nB. b\nC. c\nD. d\nAnswer:"
    )
    assert mmlu.choices == [" A", " B", " C", " D"] and mmlu.answer == 3


def test_bad_rows_and_missing_data_are_one_line_errors(tmp_path):
    bad = tmp_path / "arc.jsonl"
    bad.write_text(
        '{"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "E"}\n'
    )
    with pytest.raises(EvaluationError, match="answerKey 'E' is not one of"):
        choice.arc(config(bad), NO_MODEL)
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(EvaluationError, match="arc: an example has no field 'choices'"):
        choice.arc(config(bad), NO_MODEL)
    bad.write_text(
        '{"activity_label": "a", "ctx_a": "b", "ctx_b": "", "endings": ["x", "y"], "label": "5"}\n'
    )
    with pytest.raises(EvaluationError, match="answer 5 is out of range for 2 choices"):
        choice.hellaswag(config(bad), NO_MODEL)
    with pytest.raises(EvaluationError, match="no file matches"):
        choice.arc(config(tmp_path / "missing-*.jsonl"), NO_MODEL)


def test_offline_without_files_says_how_to_use_local_files():
    online = choice_config("Rowan/hellaswag", "", "validation")()
    with pytest.raises(
        EvaluationError,
        match=r"hellaswag: cannot load Rowan/hellaswag .*evaluate\.options\.hellaswag\.files",
    ):
        choice.hellaswag(online, NO_MODEL)
