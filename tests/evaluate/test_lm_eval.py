"""lm-evaluation-harness as a client: the model ``theseus`` against the built-in evaluations.

Tasks are local YAML files (tests/evaluate/lm_eval_tasks/) over local jsonl, in the three
request styles: multiple choice (HellaSwag read by lm-eval's own ``process_docs``, ARC and
MMLU prompts), rolling log-likelihood (whole-document perplexity) and generate_until
(addition in the chat template). On the same model and items, the harness and the built-in
evaluations agree per item.

Tolerance of log-likelihoods: both sides score with the same float32 model, but different
batch compositions pad rows to different widths, which changes XLA's reduction order. Each
token's log-probability then moves by a few float32 ulps of values of magnitude <= ~20
(~1e-6 each); a request sums at most max_seq_len = 64 of them, so |difference| <= 1e-4.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from theseus.core.data.api import find_dataset

from tests.conftest import host_devices
from tests.evaluate.conftest import ADDITION_SFT, RUN, STEPS, corpus_lines, write_jsonl
from tests.train.conftest import metrics, theseus_cmd

# local data only: fail instead of reaching for the hub (read when `datasets` is imported)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.slow
needs_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="lm-eval is not installed (pip install 'theseus-core[lm-eval]')",
)
TASKS = Path(__file__).parent / "lm_eval_tasks"
TOLERANCE = 1e-4  # see the module docstring
CHOICE = {"hellaswag": "theseus_hellaswag", "arc": "theseus_arc", "mmlu": "theseus_mmlu"}
SFT = [*ADDITION_SFT, "training.total_steps=150", "eval.every=75"]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def folder(pretrained, opened, bench_files, tmp_path_factory) -> Path:
    """The task YAMLs with their data beside them (relative data_files resolve against the
    working directory, so the harness runs from here)."""
    folder = tmp_path_factory.mktemp("lm-eval-tasks")
    for path in TASKS.iterdir():
        shutil.copy(path, folder / path.name)
    for name, path in bench_files.items():
        shutil.copy(path, folder / f"{name}.jsonl")
    lines = corpus_lines(pretrained, opened.tokenizer)
    sizes = [1, 2, 3, 5, 8, 13] * 3  # the longer documents span several 64-token windows
    docs, start = [], 0
    for size in sizes:
        docs.append("\n".join(lines[start : start + size]))
        start += size
    write_jsonl(folder / "rolling.jsonl", [{"text": doc} for doc in docs])
    return folder


def harnessed(*args, **kwargs) -> dict:
    from theseus.core.evaluate import harness

    return harness.evaluate(*args, log_samples=True, **kwargs)


def samples(results: dict, task: str) -> list[dict]:
    return sorted(results["samples"][task], key=lambda s: s["doc_id"])


def lls(results: dict, task: str) -> np.ndarray:
    """Every request's log-likelihood, in document order."""
    out = []
    for sample in samples(results, task):
        for response in sample["filtered_resps"]:
            out.append(response[0] if isinstance(response, list) else response)
    return np.array(out, dtype=np.float64)


@pytest.fixture(scope="module")
def reference(opened, folder) -> dict:
    """Harness results of the pretrained model: multiple choice and rolling, batch 8."""
    with contextlib.chdir(folder):
        return harnessed([*CHOICE.values(), "theseus_rolling"], target=opened, include_path=".")


@pytest.fixture(scope="module")
def sft(folder, tmp_path_factory) -> Path:
    """A GPT fine-tuned on addition, evaluated during training by the built-in addition
    and by lm-eval's generate_until on the same problems."""
    root = tmp_path_factory.mktemp("lm-eval-sft")
    options = (
        "eval.options={addition: {max_digits: 1, split: training}, lm-eval: {tasks: "
        f"[theseus_addition], include_path: {folder}, apply_chat_template: true}}}}"
    )
    args = theseus_cmd(
        "run", "gpt/train/sft", *SFT, "eval.tasks=[addition, lm-eval]", options,
        "--root", str(root), "--name", "add",
    )  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def sft_target(sft):
    from theseus.core.evaluate.target import checkpoint_target

    return checkpoint_target(str(sft), "add")[0]


# ----------------------------------------------------------------------------- multiple choice


@needs_lm_eval
@pytest.mark.parametrize("name", sorted(CHOICE))
def test_multiple_choice_agrees_with_the_builtin_evaluation_per_item(
    name, opened, folder, reference
):
    from theseus.core.evaluate import choice, harness, sources
    from theseus.core.evaluate.configs import choice_config

    task = CHOICE[name]
    config = choice_config("", "", "")(files=str(folder / f"{name}.jsonl"))
    questions = [getattr(choice, f"{name}_question")(row) for row in sources.examples(name, config)]
    # the same prompts: our reading of the benchmark is the harness's
    pairs = [(q.context, c) for q in questions for c in q.choices]
    asked = [tuple(a) for s in samples(reference, task) for a in s["arguments"]]
    assert asked == pairs
    # the same tokens: the harness encodes context + continuation together and splits
    adapter = harness.load_adapter()(target=opened)
    encode = opened.tokenizer.encode
    tokens = [(list(encode(context)), list(encode(text))) for context, text in pairs]
    assert [adapter._encode_pair(context, text) for context, text in pairs] == tokens
    # the same log-likelihoods per item, so the same answers and accuracies
    ours = np.array([ll for ll, _, _ in opened.scorer.loglikelihood(tokens)])
    theirs = lls(reference, task)
    worst = float(np.max(np.abs(ours - theirs)))
    print(f"{name}: {len(ours)} log-likelihoods, max |ours - harness| = {worst:.3g}")
    assert worst <= TOLERANCE
    builtin = getattr(choice, name)(config, opened)
    result = reference["results"][task]
    assert builtin["examples"] == len(questions) == 40
    assert result["acc,none"] == builtin["acc"]
    if "acc_norm,none" in result:
        assert result["acc_norm,none"] == builtin["acc_norm"]
    picked = {s["doc_id"]: s["acc"] for s in samples(reference, task)}
    offset = 0
    for i, question in enumerate(questions):
        scores = ours[offset : offset + len(question.choices)]
        assert picked[i] == float(np.argmax(scores) == question.answer)
        offset += len(question.choices)


@needs_lm_eval
def test_trained_model_scores_above_chance_in_the_harness(reference):
    for task in ("theseus_hellaswag", "theseus_arc"):
        assert reference["results"][task]["acc,none"] >= 0.7


# ----------------------------------------------------------------------------- rolling


def rolling_reference(target, tokens: list[int]) -> float:
    """Log-likelihood of a document after the end-of-text token, in disjoint windows of at
    most max_seq_len predicted tokens, the last one with as much context as fits."""
    size = target.max_len
    sequence = [target.tokenizer.eos_id, *tokens]  # tokens[j] is sequence[j + 1]
    requests, start = [], 0
    while start < len(tokens):
        end = min(start + size, len(tokens))
        context = sequence[max(0, end + 1 - (size + 1)) : start + 1]
        requests.append((context, tokens[start:end]))
        start = end
    return sum(ll for ll, _, _ in target.scorer.loglikelihood(requests)), len(requests)


@needs_lm_eval
def test_rolling_loglikelihood_is_the_scorers_per_document(opened, reference):
    from theseus.core.evaluate import harness

    adapter = harness.load_adapter()(target=opened)
    docs = samples(reference, "theseus_rolling")
    ours, windows = [], []
    for sample in docs:
        total, count = rolling_reference(opened, adapter.tok_encode(sample["doc"]["text"]))
        ours.append(total)
        windows.append(count)
    assert max(windows) >= 3 and min(windows) == 1
    theirs = lls(reference, "theseus_rolling")
    worst = float(np.max(np.abs(np.array(ours) - theirs)))
    print(f"rolling: {len(docs)} documents, max |ours - harness| = {worst:.3g}")
    assert worst <= TOLERANCE
    nbytes = sum(len(s["doc"]["text"].encode()) for s in docs)
    bits = -sum(ours) / nbytes / math.log(2)
    assert reference["results"]["theseus_rolling"]["bits_per_byte,none"] == pytest.approx(
        bits, rel=1e-6
    )


# ----------------------------------------------------------------------------- generation


@needs_lm_eval
def test_generate_until_agrees_with_the_builtin_addition(sft_target, folder):
    from theseus.core.evaluate import generation, harness
    from theseus.core.evaluate.configs import AdditionEvalConfig

    config = AdditionEvalConfig(max_digits=1, split="training")  # as the sft fixture's
    problems = generation.addition_problems(config)
    rows = [json.loads(line) for line in (folder / "addition.jsonl").read_text().splitlines()]
    assert [(r["question"], r["answer"]) for r in rows] == problems  # the fixture is current
    builtin = generation.addition(config, sft_target)
    with contextlib.chdir(folder):
        result = harnessed(["theseus_addition"], target=sft_target, include_path=".",
                         apply_chat_template=True)  # fmt: skip
    done = samples(result, "theseus_addition")
    adapter = harness.load_adapter()(target=sft_target)
    prompts = [sft_target.chat_prompt(question) for question, _ in problems]
    assert [adapter.tok_encode(s["arguments"][0][0]) for s in done] == prompts
    ours = generation.greedy(sft_target, prompts, config.max_new_tokens)
    assert [s["resps"][0][0] for s in done] == ours  # the same text, item by item
    em = result["results"]["theseus_addition"]["exact_match,strip"]
    print(f"addition: exact match {builtin['exact_match']} built-in, {em} harness")
    assert em == builtin["exact_match"] and 0 < em


@needs_lm_eval
def test_evaluations_during_training_include_the_harness(sft):
    lines = [m for m in metrics(sft, "add") if "eval/addition/exact_match" in m]
    assert [m["step"] for m in lines] == [75, 150]
    for line in lines:
        key = "eval/lm-eval/theseus_addition/exact_match/strip"
        assert line[key] == line["eval/addition/exact_match"]
        step = line["step"]
        saved = json.loads(
            (sft / "runs" / "add" / "evaluations" / f"step-{step}.lm-eval.json").read_text()
        )
        assert saved["results"]["theseus_addition"]["exact_match,strip"] == line[key]
        assert saved["config"]["model"] == "theseus"


# ----------------------------------------------------------------------------- invariance


@needs_lm_eval
def test_results_do_not_depend_on_the_batch_size(opened, sft_target, folder, reference):
    one = dataclasses.replace(opened, batch_size=1, _scorer=None, outputs={})
    tasks = ["theseus_arc", "theseus_rolling"]
    with contextlib.chdir(folder):
        single = harnessed(tasks, target=one, include_path=".")
        gen = {
            size: harnessed(
                ["theseus_addition"],
                target=dataclasses.replace(sft_target, batch_size=size, _scorer=None),
                include_path=".",
                apply_chat_template=True,
                limit=40,
            )  # fmt: skip
            for size in (1, 8)
        }
    assert single["config"]["batch_size"] == 1 and reference["config"]["batch_size"] == 8
    for task in tasks:
        worst = float(np.max(np.abs(lls(single, task) - lls(reference, task))))
        print(f"{task}: batch 1 vs 8, max |difference| = {worst:.3g}")
        assert worst <= TOLERANCE
        for key, value in reference["results"][task].items():
            if key.startswith("acc"):
                assert single["results"][task][key] == value
    rolling = reference["results"]["theseus_rolling"]["bits_per_byte,none"]
    assert single["results"]["theseus_rolling"]["bits_per_byte,none"] == pytest.approx(
        rolling, rel=1e-6
    )
    texts = {size: [s["resps"] for s in samples(r, "theseus_addition")] for size, r in gen.items()}
    assert texts[1] == texts[8]
    assert gen[1]["results"] == gen[8]["results"]


# ----------------------------------------------------------------------------- entry points


@needs_lm_eval
def test_the_evaluate_job_writes_the_harness_json_beside_its_results(pretrained, folder):
    args = theseus_cmd(
        "run", "gpt/evaluate", f"evaluate.checkpoint={RUN}", "evaluate.tasks=[arc]",
        f"evaluate.options={{arc: {{files: {folder / 'arc.jsonl'}}}}}",
        "evaluate.lm_eval_tasks=[theseus_arc]", f"evaluate.lm_eval_include_path={folder}",
        "--root", str(pretrained), "--name", "eval-lm",
    )  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    run = pretrained / "runs" / "eval-lm"
    saved = json.loads((run / "results.json").read_text())
    assert saved["source"] == {"run": RUN, "step": STEPS}
    assert saved["tasks"] == ["arc", "lm-eval"] and saved["files"] == {"lm-eval": "lm-eval.json"}
    ours, theirs = saved["results"]["arc"], saved["results"]["lm-eval"]
    assert theirs["theseus_arc/acc"] == ours["acc"] and theirs["theseus_arc/examples"] == 40
    assert theirs["theseus_arc/acc_norm"] == ours["acc_norm"]
    raw = json.loads((run / "lm-eval.json").read_text())
    assert raw["results"]["theseus_arc"]["acc,none"] == ours["acc"]
    assert metrics(pretrained, "eval-lm")[-1]["eval/lm-eval/theseus_arc/acc"] == ours["acc"]


@needs_lm_eval
def test_the_cli_on_four_simulated_devices_with_fsdp_agrees(
    pretrained, folder, reference, tmp_path
):
    """``theseus lm-eval`` (lm-eval's own command line) with the parameters sharded."""
    env = {**os.environ, "XLA_FLAGS": host_devices(4)}
    args = theseus_cmd(
        "lm-eval", "--model", "theseus",
        "--model_args", f"run={RUN}@{STEPS},root={pretrained},sharding=fsdp",
        "--tasks", "theseus_arc,theseus_rolling", "--include_path", str(folder),
        "--batch_size", "8", "--output_path", str(tmp_path), "--log_samples",
    )  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=folder, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sharded over 4 device(s)" in result.stderr
    assert "|theseus_arc" in result.stdout
    (saved,) = tmp_path.rglob("results_*.json")
    assert saved.parent == tmp_path / f"{RUN}-at-{STEPS}"  # named after the run, not at random
    arc = json.loads(saved.read_text())["results"]["theseus_arc"]
    assert arc["acc,none"] == reference["results"]["theseus_arc"]["acc,none"]
    for task in ("theseus_arc", "theseus_rolling"):
        (path,) = tmp_path.rglob(f"samples_{task}_*.jsonl")
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows.sort(key=lambda s: s["doc_id"])
        # lm-eval's samples files hold the responses as strings
        sharded = [r[0] if isinstance(r, list) else r for s in rows for r in s["filtered_resps"]]
        worst = float(np.max(np.abs(np.array(sharded, float) - lls(reference, task))))
        print(f"{task}: fsdp on 4 devices vs 1 device, max |difference| = {worst:.3g}")
        assert worst <= TOLERANCE


@needs_lm_eval
def test_imported_weights_score_like_their_run(opened, folder, reference, tmp_path):
    from theseus.core.plugins import registries

    registries().hook.theseus_save_hf_model(model=opened.model, directory=str(tmp_path / "hf"))
    tokenizer = find_dataset(Path(opened.root), "python-stdlib") / "tokenizer"
    with contextlib.chdir(folder):
        result = harnessed(["theseus_arc"], f"hf_dir={tmp_path / 'hf'},tokenizer={tokenizer}",
                         include_path=".")  # fmt: skip
    assert result["config"]["model_args"] == {"hf_dir": str(tmp_path / "hf")}
    worst = float(np.max(np.abs(lls(result, "theseus_arc") - lls(reference, "theseus_arc"))))
    assert worst <= TOLERANCE


@needs_lm_eval
def test_the_cli_without_an_output_path_writes_into_the_runs_folder(pretrained, folder):
    args = theseus_cmd(
        "lm-eval", "--model", "theseus", "--model_args", f"run={RUN},root={pretrained}",
        "--tasks", "theseus_arc", "--include_path", str(folder), "--limit", "4",
    )  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    (saved,) = (pretrained / "runs" / RUN / "lm-eval").glob("results_*.json")
    assert json.loads(saved.read_text())["results"]["theseus_arc"]["alias"] == "theseus_arc"
    assert not list(folder.rglob("results_*.json"))  # nothing in the working directory
    # before (issue 35): lm-eval's default device reached the model, which said on a CPU
    # "device=cuda:0 is ignored", and the results recorded cuda:0 as the device
    assert "cuda" not in result.stderr, result.stderr[-3000:]
    assert json.loads(saved.read_text())["config"]["device"] == "cpu"


@needs_lm_eval
def test_a_device_given_is_kept_and_only_another_backends_is_noted():
    from theseus.core.evaluate.harness import with_device
    from theseus.core.evaluate.lm_eval_model import on_jax_backend

    args = ["--model", "theseus", "--tasks", "x"]
    assert with_device(args) == [*args, "--device", "cpu"]  # JAX's backend in these tests
    assert with_device([*args, "--device", "cuda:0"]) == [*args, "--device", "cuda:0"]
    assert on_jax_backend("cpu") and not on_jax_backend("cuda:0")


def test_output_path_placement_is_decided_from_the_arguments(tmp_path):
    from theseus.core.evaluate.harness import placed_output, results_name

    run = ["--model", "theseus", "--model_args", f"run=pre@400,root={tmp_path}", "--tasks", "x"]
    assert placed_output(run)[-2:] == [
        "--output_path",
        str(tmp_path / "runs" / "pre" / "lm-eval" / "results.json"),
    ]
    assert placed_output([*run, "--output_path", "out"]) == [*run, "--output_path", "out"]
    assert placed_output([*run, "-o=out"]) == [*run, "-o=out"]
    hf = ["--model", "theseus", "--model_args", f"hf_dir={tmp_path / 'gpt2-ft'}"]
    assert placed_output(hf) == hf  # no run: lm-eval's own rules
    assert results_name({"run": "pre@400"}) == "pre-at-400"
    assert results_name({"hf_dir": str(tmp_path / "gpt2-ft")}) == "gpt2-ft"
    other = ["--model", "hf", "--model_args", "pretrained=gpt2"]
    assert placed_output(other) == other


@needs_lm_eval
def test_bad_model_args_are_one_line_errors(pretrained):
    from theseus.core.evaluate import harness
    from theseus.core.evaluate.errors import EvaluationError

    tasks = ["theseus_arc"]
    with pytest.raises(EvaluationError, match="exactly one of run"):
        harness.evaluate(tasks, f"run={RUN},hf_dir=x,root={pretrained}", include_path=str(TASKS))
    with pytest.raises(EvaluationError, match="no argument.s. pretrained"):
        harness.evaluate(
            tasks, f"run={RUN},root={pretrained},pretrained=gpt2", include_path=str(TASKS)
        )


def test_without_lm_eval_the_error_names_the_pip_command(tmp_path):
    """lm_eval made unimportable: the command and the job both fail in one line."""
    hide = "import sys; sys.modules['lm_eval'] = None; from theseus.cli.main import main; main()"
    for argv in (
        ["lm-eval", "--model", "theseus", "--tasks", "arc_easy"],
        ["run", "gpt/evaluate", "evaluate.checkpoint=x", "evaluate.tasks=[]",
         "evaluate.lm_eval_tasks=[arc_easy]", "--root", str(tmp_path)],
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-c", hide, *argv], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 2, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last == (
            "error: evaluating with lm-evaluation-harness needs the lm_eval package: "
            "pip install 'theseus-core[lm-eval]'"
        )
