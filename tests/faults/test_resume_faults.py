"""Starting a run again never damages it.

Before: resuming with another ``model.d_model`` called every checkpoint "unreadable",
rewrote config.yaml with the new values and marked the run failed; with its checkpoints
deleted a run restarted from step 0 and appended a second history to metrics.jsonl; a
rerun of a finished run wrote ``NaN`` into summary.json; after a kill, metrics.jsonl
repeated the steps between the checkpoint and the kill.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import yaml

from tests.faults.test_locks import snapshot
from tests.train.conftest import TINY, kill_after, metrics, run_cli

ARGS = ["run", "gpt/train/pretrain", *TINY, "eval.every=0", "checkpoint.every=2"]
STRETCH = "training.schedule_on_resume=stretch"  # a longer resume re-plans the lr schedule


@pytest.fixture(scope="module")
def finished(shared_root) -> Path:
    """A finished 4-step run with checkpoints 2 and 4, copied by each test that changes it."""
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", "resume-base")
    assert done.returncode == 0, done.stderr[-3000:]
    return shared_root / "runs" / "resume-base"


def args_with(*overrides: str) -> list[str]:
    """ARGS with each ``key=value`` replacing that key's value (a key is given once)."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [a for a in ARGS if a.split("=", 1)[0] not in keys] + list(overrides)


def clone(run: Path, name: str) -> Path:
    copy = run.parent / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy)
    record = json.loads((copy / "job.json").read_text())
    (copy / "job.json").write_text(json.dumps({**record, "name": name}))
    return copy


def last_line(done) -> str:
    return done.stderr.strip().splitlines()[-1]


def train_steps(root: Path, name: str) -> list[int]:
    return [row["step"] for row in metrics(root, name) if "train/loss" in row]


def test_a_config_change_that_changes_training_is_refused_untouched(shared_root, finished):
    run = clone(finished, "resume-refused")
    before = snapshot(run)
    args = args_with("training.total_steps=6", "model.d_model=32")
    done = run_cli(shared_root, *args, "--name", run.name)
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    line = last_line(done)
    assert line.startswith(f"error: run '{run.name}' under {shared_root} was started with")
    assert "(model.d_model: 64 -> 32)" in line  # total_steps is a safe change: not listed
    assert "--fresh" in line and f"--branch {run.name}" in line
    assert snapshot(run) == before  # config.yaml, job.json, metrics, checkpoints


def test_safe_changes_are_allowed_and_recorded_and_each_step_is_written_once(shared_root, finished):
    run = clone(finished, "resume-longer")
    args = args_with("checkpoint.every=3", "training.total_steps=6", STRETCH)
    done = run_cli(shared_root, *args, "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run / "job.json").read_text())
    assert record["history"][-1]["changed"] == {
        "checkpoint.every": [2, 3],
        "training.schedule_on_resume": ["refuse", "stretch"],
        "training.total_steps": [4, 6],
    }
    assert record["attempts"] == 2 and record["checkpoint_step"] == 6
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["training"]["total_steps"] == 6
    assert train_steps(shared_root, run.name) == list(range(6))


def test_a_run_whose_checkpoints_are_gone_does_not_restart_from_zero(shared_root, finished):
    run = clone(finished, "resume-gone")
    shutil.rmtree(run / "checkpoints")
    before = snapshot(run)
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name)
    assert done.returncode == 2, done.stderr[-3000:]
    assert last_line(done) == (
        f"error: run '{run.name}' under {shared_root} checkpointed step 4 but "
        f"{run / 'checkpoints'} holds no checkpoint: it will not restart from step 0 under the "
        "same name; rerun with --fresh to start it over"
    )
    assert snapshot(run) == before
    fresh = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name, "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert train_steps(shared_root, run.name) == [0, 1, 2, 3]


def test_rerunning_a_finished_run_rewrites_no_metrics_and_keeps_json_valid(shared_root, finished):
    run = clone(finished, "resume-again")
    metrics_before = (run / "metrics.jsonl").read_bytes()
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "metrics.jsonl").read_bytes() == metrics_before

    def no_constants(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}, which is not JSON")

    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_constants)
    assert summary["step"] == 4 and isinstance(summary["train/loss"], float)


def test_after_a_kill_metrics_hold_each_step_once(shared_root):
    name = "resume-killed"
    args = [*ARGS, "training.total_steps=8"]
    kill_after(shared_root, name, args, steps=5, sig=signal.SIGKILL)
    rows_before = metrics(shared_root, name)
    # killed without a word: job.json still says running, the listing says died (issue 24)
    record = json.loads((shared_root / "runs" / name / "job.json").read_text())
    assert record["status"] == "running"
    listed = run_cli(shared_root, "runs")
    row = next(line.split() for line in listed.stdout.splitlines() if line.split()[:1] == [name])
    assert row[2] == "died", listed.stdout
    done = run_cli(shared_root, *args, "--name", name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert train_steps(shared_root, name) == list(range(8))
    resumed = json.loads((shared_root / "runs" / name / "job.json").read_text())["history"]
    assert len(resumed) == 2
    moved_path = shared_root / "runs" / name / "metrics.superseded.jsonl"
    moved = [json.loads(x) for x in moved_path.read_text().splitlines()]
    restored = min(row["step"] for row in moved)  # the checkpoint the second attempt took
    assert restored % 2 == 0 and restored < 5
    kept = [row for row in rows_before if row not in moved]
    assert all(row["step"] < restored for row in kept if "train/loss" in row)
    assert len(moved) + len(kept) == len(rows_before)  # nothing lost: moved aside


def assert_missing_record_refusal(done, run: Path, root: Path, first: list[str]) -> None:
    """One line: no job.json, what the folder holds (its first entries named), the two ways
    forward. (Other files a run writes may follow the names given.)"""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(
        f"error: run '{run.name}' under {root} has no job.json (its record) but its folder "
        f"holds {', '.join(first)}"
    ), lines[0]
    rebuild = (
        f", rebuild it with `theseus rebuild-record {run.name} --root {root}`"
        if (run / "config.yaml").exists()
        else ""
    )
    assert lines[0].endswith(
        f": restore job.json to resume it{rebuild}, or rerun with --fresh to start it over "
        "(the folder is replaced)"
    ), lines[0]


def test_a_run_without_job_json_is_refused_untouched_whatever_the_config(shared_root, finished):
    """Before: with job.json deleted, a resume with another d_model rewrote config.yaml, and
    the original command was then refused with a false diff."""
    run = clone(finished, "resume-no-record")
    (run / "job.json").unlink()
    before = snapshot(run)
    for args in (args_with("model.d_model=32"), args_with("training.total_steps=4")):
        done = run_cli(shared_root, *args, "--name", run.name)
        assert_missing_record_refusal(done, run, shared_root, ["checkpoints", "config.yaml"])
        assert snapshot(run) == before  # nothing refused wrote anything
    branched = run_cli(shared_root, *ARGS, "--name", run.name, "--branch", finished.name)
    assert branched.returncode == 2 and "has no job.json" in last_line(branched)
    assert snapshot(run) == before


def test_a_run_without_job_json_and_checkpoints_does_not_restart_from_zero(shared_root, finished):
    """Before: with checkpoints and job.json both deleted the run restarted from step 0."""
    run = clone(finished, "resume-no-record-no-ckpt")
    (run / "job.json").unlink()
    shutil.rmtree(run / "checkpoints")
    before = snapshot(run)
    done = run_cli(shared_root, *ARGS, "training.total_steps=4", "--name", run.name)
    assert_missing_record_refusal(
        done, run, shared_root, ["config.yaml", "data-identity.json", "logs"]
    )
    assert snapshot(run) == before


def test_a_run_without_config_yaml_is_refused_and_fresh_starts_it_over(shared_root, finished):
    run = clone(finished, "resume-no-config")
    (run / "config.yaml").unlink()
    before = snapshot(run)
    done = run_cli(shared_root, *args_with("model.d_model=32"), "--name", run.name)
    assert done.returncode == 2, done.stderr[-3000:]
    assert last_line(done) == (
        f"error: run '{run.name}' under {shared_root} has progress but its config.yaml is gone: "
        "its config is unknown, so it cannot be resumed; restore config.yaml, or rerun with "
        "--fresh to start it over"
    )
    assert snapshot(run) == before
    fresh = run_cli(shared_root, *ARGS, "training.total_steps=2", "--name", run.name, "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert train_steps(shared_root, run.name) == [0, 1]


def test_a_folder_holding_only_a_sibling_process_log_starts_as_a_new_run(shared_root):
    """Before: in a two-host launch on a shared file system, host 1 opened its log (and wrote
    config.yaml and job.json of its own) before host 0 checked the folder, and host 0 refused
    the run as one that lost its job.json (seen under load in the real-sshd two-host test).
    Now only process 0 writes the records, and a folder holding nothing but ``logs`` is a
    run about to start."""
    run = shared_root / "runs" / "resume-sibling-log"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "run.log").write_text("theseus: process 1 of 2\n")
    done = run_cli(shared_root, *ARGS, "training.total_steps=2", "--name", run.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert train_steps(shared_root, run.name) == [0, 1]
    assert "process 1 of 2" in (run / "logs" / "run.log").read_text()  # appended, not replaced


def test_a_checkpoints_folder_linked_into_another_run_is_refused_and_both_runs_untouched(
    shared_root, finished
):
    """Before: the resumed run said "resumed from step 4" on the other run's weights, wrote
    its next checkpoint into the other run's folder, and keep-last deleted one of the other
    run's checkpoints."""
    run, other = clone(finished, "linked"), clone(finished, "linked-target")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(Path("..") / "linked-target" / "checkpoints")
    before, before_other = snapshot(run), snapshot(other)
    done = run_cli(shared_root, *args_with("training.total_steps=6", STRETCH), "--name", "linked")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    line = last_line(done)
    assert "checkpoints is a link to" in line and "outside run 'linked'" in line, line
    assert snapshot(run) == before and snapshot(other) == before_other


def test_a_link_deeper_in_the_run_folder_is_refused_too(shared_root, finished, tmp_path):
    """One checkpoint (not the folder holding them) linked to a folder outside the run."""
    run = clone(finished, "linked-deep")
    outside = tmp_path / "elsewhere"
    shutil.move(run / "checkpoints" / "4", outside)
    (run / "checkpoints" / "4").symlink_to(outside)
    before = snapshot(run)
    done = run_cli(
        shared_root, *args_with("training.total_steps=6", STRETCH), "--name", "linked-deep"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = last_line(done)
    assert f"checkpoints/4 is a link to {outside}, outside run 'linked-deep'" in line, line
    assert snapshot(run) == before


def test_a_run_folder_linked_to_another_runs_folder_is_refused(shared_root, finished):
    clone(finished, "alias-target")
    alias = finished.parent / "alias"
    alias.unlink(missing_ok=True)
    alias.symlink_to("alias-target")
    before = snapshot(finished.parent / "alias-target")
    done = run_cli(shared_root, *args_with("training.total_steps=6", STRETCH), "--name", "alias")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "is a link to run 'alias-target'" in last_line(done), last_line(done)
    assert snapshot(finished.parent / "alias-target") == before


def test_a_follower_process_does_not_judge_the_folder_process_0_is_creating(tmp_path, monkeypatch):
    """Found from the flaky two-host test's logs (issue 37): process 1 met the run folder
    while process 0 was creating it (config.yaml and logs written, job.json not yet), took it
    for a run that lost its record and exited 2 without a word to the coordinator; process 0
    then waited 100 s for its heartbeats and aborted (exit 134). Process 0 checks the records
    for every process; process 1 prepares the same run from what it finds."""
    from theseus.core.errors import JobError
    from theseus.core.runner import prepare

    run = tmp_path / "runs" / "pair"
    (run / "logs").mkdir(parents=True)
    (run / "config.yaml").write_text("task:\n  steps: 1\n")
    monkeypatch.setenv("THESEUS_COORDINATOR_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("THESEUS_NUM_PROCESSES", "2")
    monkeypatch.setenv("THESEUS_PROCESS_ID", "1")
    prepared = prepare("core/info", root=tmp_path, name="pair")
    assert prepared.name == "pair"
    monkeypatch.setenv("THESEUS_PROCESS_ID", "0")  # process 0 (or a lone process) refuses it
    with pytest.raises(JobError, match="has no job.json"):
        prepare("core/info", root=tmp_path, name="pair")
