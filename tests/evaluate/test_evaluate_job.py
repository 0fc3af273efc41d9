"""``gpt/evaluate`` on a training checkpoint through the CLI: results JSON, metrics log,
agreement with the trainer's validation loss, determinism and one-line errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from theseus.core.data.api import find_dataset

from tests.evaluate.conftest import RUN, STEPS
from tests.train.conftest import metrics, run_cli

TASKS = "evaluate.tasks=[val-ppl, hellaswag, arc]"


def evaluate_cli(root, name, *overrides):
    result = run_cli(root, "run", "gpt/evaluate", *overrides, "--name", name)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((root / "runs" / name / "results.json").read_text())


def options(bench_files, rows=8):
    hs, arc = bench_files["hellaswag"], bench_files["arc"]
    return f"evaluate.options={{val-ppl: {{rows: {rows}}}, hellaswag: {{files: {hs}}}, arc: {{files: {arc}}}}}"


@pytest.fixture(scope="module")
def first(pretrained, bench_files):
    return evaluate_cli(
        pretrained, "eval-a", f"evaluate.checkpoint={RUN}", TASKS, options(bench_files)
    )


def test_val_ppl_of_a_checkpoint_is_the_trainers_validation_loss(pretrained, first):
    assert first["source"] == {"run": RUN, "step": STEPS}
    ppl = first["results"]["val-ppl"]
    # eval.batches=2 x global batch 4 = the first 8 validation rows, as asked for here
    trainer_val = [m["val/loss"] for m in metrics(pretrained, RUN) if "val/loss" in m][-1]
    assert ppl["rows"] == 8 and ppl["tokens"] == 8 * 32
    assert ppl["loss"] == pytest.approx(trainer_val, rel=1e-6)
    assert ppl["perplexity"] == pytest.approx(math.exp(ppl["loss"]), rel=1e-12)


def test_bits_per_byte_follows_from_loss_and_the_bytes_per_token(pretrained, first, opened):
    ppl = first["results"]["val-ppl"]
    bytes_per_token = ppl["bytes"] / ppl["tokens"]
    assert ppl["bits_per_byte"] == pytest.approx(
        ppl["loss"] / math.log(2) / bytes_per_token, rel=1e-12
    )
    # the ratio agrees with the whole validation split's, measured independently
    from theseus.core.data.reader import TokenizedDataset

    split = TokenizedDataset(find_dataset(pretrained, "python-stdlib")).splits["validation"]
    ids = np.concatenate([s.tokens for s in split]).astype(np.int64)
    ids = ids[~np.isin(ids, sorted(opened.special_ids()))]
    split_ratio = len(opened.tokenizer.decode(ids.tolist()).encode()) / len(ids)
    assert 1.0 < bytes_per_token and abs(bytes_per_token / split_ratio - 1) < 0.25


def test_results_json_and_metrics_log_hold_the_same_numbers(pretrained, first):
    lines = metrics(pretrained, "eval-a")
    assert len(lines) == 1 and lines[0]["step"] == STEPS
    for task, values in first["results"].items():
        for metric, value in values.items():
            assert lines[0][f"eval/{task}/{metric}"] == value
    assert set(first["results"]) == {"val-ppl", "hellaswag", "arc"}
    assert first["results"]["hellaswag"]["examples"] == 40


def test_same_checkpoint_same_numbers_and_an_earlier_step_scores_worse(
    pretrained, first, bench_files
):
    again = evaluate_cli(
        pretrained, "eval-b", f"evaluate.checkpoint={RUN}@{STEPS}", TASKS, options(bench_files),
        "evaluate.batch_size=3", "evaluate.padding_side=left",
    )  # fmt: skip
    assert again["source"] == first["source"]
    for task, values in first["results"].items():
        for metric, value in values.items():
            assert again["results"][task][metric] == pytest.approx(value, rel=1e-6), (task, metric)
    earlier = evaluate_cli(
        pretrained, "eval-c", f"evaluate.checkpoint={RUN}@200", "evaluate.tasks=[val-ppl]",
        "evaluate.options={val-ppl: {rows: 8}}",
    )  # fmt: skip
    assert earlier["source"]["step"] == 200
    assert earlier["results"]["val-ppl"]["loss"] > first["results"]["val-ppl"]["loss"] + 0.05


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["evaluate.checkpoint=pre", "evaluate.tasks=[hellaswg]"], "unknown evaluation 'hellaswg'; did you mean 'hellaswag'?"),
        (["evaluate.tasks=[val-ppl]"], "set exactly one of evaluate.checkpoint=RUN[@STEP] and evaluate.hf_dir=DIR"),
        (["evaluate.checkpoint=pre", "evaluate.options={val-ppl: {rowz: 3}}"], "evaluation 'val-ppl' has no option(s) rowz"),
        (["evaluate.checkpoint=pre", "evaluate.options={arc: {files: x}}"], "options given for arc, which is not in the tasks"),
        (["evaluate.checkpoint=nope"], "no run named 'nope'"),
    ],
)  # fmt: skip
def test_mistakes_are_one_line_errors(pretrained, overrides, message):
    name = f"eval-bad-{sum(map(ord, message))}"  # a new run each (a same name would resume)
    result = run_cli(pretrained, "run", "gpt/evaluate", *overrides, "--name", name)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_run_of_another_family_is_refused(pretrained):
    result = run_cli(
        pretrained, "run", "llama/evaluate", f"evaluate.checkpoint={RUN}", "--name", "eval-bad"
    )
    assert result.returncode == 2
    assert "run 'pre' is a gpt/train/pretrain run: evaluate it with gpt/evaluate" in result.stderr


def test_imported_hf_weights_score_like_the_checkpoint(
    pretrained, opened, first, bench_files, tmp_path
):
    import shutil

    from theseus.models.hf import save_hf

    hf_dir = save_hf(opened.model, tmp_path / "hf")
    shutil.copy(find_dataset(pretrained, "python-stdlib") / "tokenizer" / "tokenizer.json", hf_dir)
    hs = bench_files["hellaswag"]
    imported = evaluate_cli(
        pretrained, "eval-hf", f"evaluate.hf_dir={hf_dir}", "evaluate.tasks=[val-ppl, hellaswag]",
        f"evaluate.options={{val-ppl: {{rows: 8, seq_len: 32, dataset: python-stdlib}}, hellaswag: {{files: {hs}}}}}",
    )  # fmt: skip
    assert imported["source"] == {"hf_dir": str(hf_dir)}
    assert imported["results"]["hellaswag"] == first["results"]["hellaswag"]
    for metric in ("loss", "bits_per_byte", "tokens", "bytes"):
        wanted = first["results"]["val-ppl"][metric]
        assert imported["results"]["val-ppl"][metric] == pytest.approx(wanted, rel=1e-6)
