"""Generation with exact match: a GPT fine-tuned on ``addition`` with ``eval.tasks`` set,
then ``gpt/evaluate`` on its checkpoint (addition, gsm8k-schema jsonl, val-ppl)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from theseus.core.evaluate import generation
from theseus.core.evaluate.configs import AdditionEvalConfig

from tests.evaluate.conftest import ADDITION_SFT, untrained, write_jsonl
from tests.train.conftest import metrics, run_cli

pytestmark = pytest.mark.slow
RUN = "add"
# one-digit problems the training set holds (not the held-out ones): these tests check the
# machinery on a model that has memorized its table
ADDITION = AdditionEvalConfig(max_digits=1, split="training")
OPTIONS = "{max_digits: 1, split: training}"
SFT = [
    *ADDITION_SFT, "training.total_steps=300", "eval.every=150",
    "eval.tasks=[addition, val-ppl]", f"eval.options={{addition: {OPTIONS}}}",
]  # fmt: skip


@pytest.fixture(scope="module")
def sft_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("addition-root")
    result = run_cli(root, "run", "gpt/train/sft", *SFT, "--name", RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def gsm8k_file(tmp_path_factory):
    """The addition problems in GSM8K's schema (question, reasoning + ``#### answer``)."""
    rows = [
        {"question": q, "answer": f"{q[8:-1]} = {a}\n#### {a}"}
        for q, a in generation.addition_problems(ADDITION)
    ]
    return write_jsonl(tmp_path_factory.mktemp("gsm8k") / "gsm8k.jsonl", rows)


def test_evaluations_during_training_go_to_json_and_the_metrics_log(sft_root):
    lines = [m for m in metrics(sft_root, RUN) if "eval/addition/exact_match" in m]
    assert [m["step"] for m in lines] == [150, 300]
    for line in lines:
        saved = json.loads(
            (sft_root / "runs" / RUN / "evaluations" / f"step-{line['step']}.json").read_text()
        )
        assert saved["tasks"] == ["addition", "val-ppl"]
        for task, values in saved["results"].items():
            for name, value in values.items():
                assert line[f"eval/{task}/{name}"] == value
    middle, final = (line for line in lines)
    assert final["eval/addition/exact_match"] >= 0.9
    assert final["eval/addition/answer_logprob"] > middle["eval/addition/answer_logprob"]
    assert final["eval/val-ppl/loss"] < middle["eval/val-ppl/loss"]


def test_the_evaluate_job_reproduces_the_training_numbers(sft_root, gsm8k_file):
    result = run_cli(
        sft_root, "run", "gpt/evaluate", f"evaluate.checkpoint={RUN}",
        "evaluate.tasks=[addition, val-ppl, gsm8k]",
        f"evaluate.options={{addition: {OPTIONS}, "
        f"gsm8k: {{files: {gsm8k_file}, chat: true, max_new_tokens: 8}}}}",
        "--name", "eval-add",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((sft_root / "runs" / "eval-add" / "results.json").read_text())
    during = json.loads((sft_root / "runs" / RUN / "evaluations" / "step-300.json").read_text())
    assert saved["source"] == {"run": RUN, "step": 300}
    assert saved["results"]["addition"] == during["results"]["addition"]
    assert saved["results"]["val-ppl"] == during["results"]["val-ppl"]
    # the same problems read as GSM8K rows score the same exact match
    gsm8k = saved["results"]["gsm8k"]
    assert gsm8k["examples"] == 100
    assert gsm8k["exact_match"] == saved["results"]["addition"]["exact_match"]


def test_a_trained_model_adds_and_an_untrained_one_does_not(sft_root):
    from theseus.core.evaluate.target import checkpoint_target

    trained, _ = checkpoint_target(str(sft_root), RUN)
    config = dataclasses.replace(ADDITION, limit=40)
    good = generation.addition(config, trained)
    bad = generation.addition(config, untrained(trained, RUN, 300))
    assert good["exact_match"] >= 0.9 and bad["exact_match"] <= 0.1
    assert good["answer_logprob"] > bad["answer_logprob"] + 3.0
    # generation too is independent of the batch size and padding side
    other = dataclasses.replace(trained, batch_size=3, padding_side="left", _scorer=None)
    again = generation.addition(config, other)
    assert again["exact_match"] == good["exact_match"]
    assert again["answer_logprob"] == pytest.approx(good["answer_logprob"], rel=1e-6)


def test_answers_are_read_like_gsm8k_does():
    assert generation._number("so 3 + 4 = 7.\n#### 1,234") == "1234"
    assert generation._number("it makes 12 then 15.") == "15"
    assert generation._number("nothing") is None
