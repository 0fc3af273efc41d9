"""Run directories, prerequisites, resume, fresh starts, branches and run-name checks."""

from __future__ import annotations

import json

import pytest
import yaml
from theseus.core.errors import JobError
from theseus.core.jobs import check_run_name, job_kind, unique_run_name
from theseus.core.resume import ResumeRefusedError
from theseus.core.runner import prepare, run


def record(root, name):
    return json.loads((root / "runs" / name / "job.json").read_text())


def test_run_directory_holds_config_record_and_log(root):
    run("example/fit-line", ["task.steps=5"], root=root, name="fit")
    path = root / "runs" / "fit"
    rec = record(root, "fit")
    assert rec["key"] == "example/fit-line" and rec["status"] == "finished"
    assert rec["versions"]["theseus-core"] == "0.1.0"
    assert rec["versions"]["theseus-example-plugin"] == "0.3.1"
    assert "source_revision" in rec and rec["parent"] is None
    assert yaml.safe_load((path / "config.yaml").read_text())["task"]["steps"] == 5
    assert (path / "logs" / "run.log").exists()


def test_prerequisites_run_first_in_the_same_root_and_are_reused(root, workflow_registries):
    first = run("wf/consume", ["count.upto=4"], root=root, name="consumer")
    assert first == {"calls": 1, "upto": 4}
    assert record(root, "produce-4")["status"] == "finished"
    second = run("wf/consume", ["count.upto=4"], root=root, name="consumer-2")
    assert second == {"calls": 1, "upto": 4}  # the finished producer was reused, not rerun


def test_same_name_resumes_with_the_saved_config(root):
    run("example/fit-line", ["task.steps=6", "optimizer.name=sgd"], root=root, name="again")
    prepared = prepare("example/fit-line", [], root=root, name="again")
    assert prepared.config.task.steps == 6 and prepared.config.optimizer.name == "sgd"
    prepared()
    assert record(root, "again")["attempts"] == 2
    with pytest.raises(ResumeRefusedError, match=r"\(task.seed: 0 -> 3\).*--fresh"):
        prepare("example/fit-line", ["task.seed=3"], root=root, name="again")


def test_fresh_starts_over_and_branch_records_the_parent(root):
    run("example/fit-line", ["task.steps=6"], root=root, name="base")
    fresh = prepare("example/fit-line", [], root=root, name="base", fresh=True)
    assert fresh.config.task.steps == 300
    branched = prepare(
        "example/fit-line", ["task.seed=9"], root=root, name="child", branch="base@5"
    )
    assert branched.config.task.steps == 6 and branched.config.task.seed == 9
    branched()
    assert record(root, "child")["parent"] == "base@5"


def test_failure_is_recorded(root, workflow_registries):
    with pytest.raises(ValueError, match="deliberate"):
        run("wf/fails", [], root=root, name="boom")
    rec = record(root, "boom")
    assert rec["status"] == "failed" and "deliberate failure" in rec["error"]


def test_a_run_name_of_another_job_is_refused(root, workflow_registries):
    run("wf/produce", [], root=root, name="taken")
    with pytest.raises(JobError, match="run 'taken'.*belongs to job wf/produce"):
        prepare("example/fit-line", [], root=root, name="taken")


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", ".hidden", "", "semi;colon", "a b"])
def test_run_names_are_validated(bad):
    with pytest.raises(JobError, match="run name"):
        check_run_name(bad)


def test_unknown_job_suggests_the_closest(root):
    with pytest.raises(
        JobError, match="unknown job 'example/fit-lines'; did you mean 'example/fit-line'"
    ):
        prepare("example/fit-lines", [], root=root)


def test_one_shot_jobs_get_a_new_default_name_and_training_jobs_resume(root, workflow_registries):
    first = prepare("wf/once", [], root=root)
    first()
    second = prepare("wf/once", ["count.upto=7"], root=root)  # another config: no refusal
    second()
    assert first.name.startswith("wf-once-") and second.name.startswith("wf-once-")
    assert first.name != second.name
    assert record(root, second.name)["status"] == "finished"
    run("example/fit-line", ["task.steps=2"], root=root)
    again = prepare("example/fit-line", [], root=root)  # a job that resumes: the key's name
    assert again.name == "example-fit-line" and again.config.task.steps == 2


def test_unique_names_within_one_second_are_counted(root):
    import datetime as dt

    when = dt.datetime(2026, 12, 4, 17, 5, 9, tzinfo=dt.UTC)
    assert unique_run_name("hf/export", root, when) == "hf-export-20261204-170509"
    (root / "runs" / "hf-export-20261204-170509").mkdir(parents=True)
    assert unique_run_name("hf/export", root, when) == "hf-export-20261204-170509-2"


def test_a_named_one_shot_run_given_another_config_says_the_name_is_taken(
    root, workflow_registries
):
    run("wf/once", [], root=root, name="exp")
    with pytest.raises(ResumeRefusedError) as refused:
        prepare("wf/once", ["count.upto=5"], root=root, name="exp")
    message = str(refused.value)
    assert "run name 'exp' is taken" in message and "finished wf/once run" in message
    assert "count.upto: 3 -> 5" in message and "--name" in message
    assert "resuming would change what it trains" not in message


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("gpt/train/pretrain", "train"),
        ("llama/train/dpo", "train"),
        ("data/tokenize/fineweb", "data"),
        ("hf/export", "export"),
        ("hf/import", "import"),
        ("gpt/generate", "generate"),
        ("gpt/evaluate", "evaluate"),
        ("example/fit-line", "fit-line"),
    ],
)
def test_job_kinds(key, kind):
    assert job_kind(key) == kind
