"""``theseus serve`` on a hostile root: it answers, quickly, and shows no secret.

The root is written by hand (the view only reads files, so no training is needed): a good
run, and runs holding what a hostile or broken root may hold under the names the view
reads. One real server answers every case.

Before (issue 24): a run whose config.yaml was a billion-laughs document wedged the server
(every API call timed out, 4.3 GB of memory); a FIFO under a run's file names hung the
request that read it, and the runs table with it; keys ``auth``, ``bearer`` and
``wandb_key`` and URLs with ``user:password@`` were shown; a run killed without a word stayed
"running".
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_yaml_faults import BOMB
from tests.inspect.serve_helpers import get_json, request, served
from tests.train.conftest import run_cli

SECRET_VALUES = (
    "s3cr3t-auth", "s3cr3t-bearer", "s3cr3t-wandb", "s3cr3t-url", "s3cr3t-log", "s3cr3t-pwd",
    "s3cr3t-cookie", "s3cr3t-json", "s3cr3t-flag", "s3cr3t-basic", "s3cr3t-pem",
    "ghp_0123456789abcdefghijABCDEFGHIJ", "s3cr3t-of-the-environment",
)  # fmt: skip
SERVER_SECRET = ("THESEUS_TEST_DB_PWD", "s3cr3t-of-the-environment")  # in the server's env
FAST = 10.0  # seconds: every answer here comes from files of a few bytes (FIFOs are not read)


def write_run(root: Path, name: str, status: str = "finished", **files: str) -> Path:
    run = root / "runs" / name
    (run / "logs").mkdir(parents=True)
    record = {"key": "gpt/train/pretrain", "name": name, "status": status, "created": "2026"}
    (run / "job.json").write_text(json.dumps(record))
    (run / "config.yaml").write_text("training:\n  seq_len: 32\n")
    (run / "metrics.jsonl").write_text('{"step": 0, "train/loss": 5.0}\n')
    for name_, text in files.items():
        (run / name_.replace("__", "/")).write_text(text)
    return run


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory) -> Iterator[Path]:
    from theseus.core.locks import exclusive, lock_path

    root = tmp_path_factory.mktemp("hostile")
    write_run(root, "good")
    write_run(root, "bomb", **{"config.yaml": BOMB})
    fifo = write_run(root, "fifo")
    for name in ("metrics.jsonl", "summary.json", "logs/run.log"):
        (fifo / name).unlink(missing_ok=True)
        os.mkfifo(fifo / name)
    record_fifo = write_run(root, "fifo-record")
    (record_fifo / "job.json").unlink()
    os.mkfifo(record_fifo / "job.json")
    huge = write_run(root, "huge")
    for name in ("summary.json", "metrics.jsonl"):
        with open(huge / name, "wb") as handle:
            handle.truncate(5 << 30)  # sparse: 5 GiB that take no space
    secrets = write_run(
        root,
        "secrets",
        **{
            "config.yaml": (
                "logging:\n  auth: s3cr3t-auth\n  bearer: s3cr3t-bearer\n  wandb:\n"
                "    wandb_key: s3cr3t-wandb\n    project: https://me:s3cr3t-url@wandb.example\n"
                "    entity: ghp_0123456789abcdefghijABCDEFGHIJ\n"
                "data:\n  tokenizer: bpe\n  dataset_options:\n    pwd: s3cr3t-pwd\n"
                "    sessionCookie: s3cr3t-cookie\n    dsn: db/s3cr3t-of-the-environment\n"
                "model:\n  n_experts_per_token: 2\n  learning_rate: 0.0003\n"
            ),
            "logs__run.log": (
                "step 1\nlogin with token=s3cr3t-log at https://me:s3cr3t-url@x\n"
                '{"user": "me", "password": "s3cr3t-json"}\nrun --password s3cr3t-flag --steps 3\n'
                "Authorization: Basic s3cr3t-basic\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
                "s3cr3t-pem\n-----END OPENSSH PRIVATE KEY-----\nopened db/s3cr3t-of-the-environment\n"
                "step 2 loss 4.5\n"
            ),
        },
    )
    record = json.loads((secrets / "job.json").read_text())
    record["history"] = [
        {"attempt": 2, "changed": {"logging.auth": ["a", "s3cr3t-auth"],
                                   "data.dataset_options.pwd": ["a", "s3cr3t-pwd"]}}
    ]  # fmt: skip
    (secrets / "job.json").write_text(json.dumps(record))
    dead = write_run(root, "dead", status="running")
    lock = lock_path(dead)
    lock.parent.mkdir(exist_ok=True)
    lock.touch()  # left by the dead run, with its owner: a process that is gone
    owner = {"pid": dead_pid(), "host": socket.gethostname(), "since": time.time() - 60}
    lock.with_suffix(".owner").write_text(json.dumps(owner))
    alive = write_run(root, "alive", status="running")
    with exclusive(alive, "run 'alive'", "wait"):  # held by this (live) test process
        yield root


@pytest.fixture(scope="module")
def url(hostile_root) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(*SERVER_SECRET)  # the server's own environment holds a secret
        with served(hostile_root) as address:
            yield address


def timed_json(url: str, path: str, status: int = 200) -> dict:
    started = time.monotonic()
    answer = get_json(url, path, status)
    assert time.monotonic() - started < FAST, path
    return answer


def test_the_table_answers_and_lists_every_run(url):
    rows = {row["name"]: row for row in timed_json(url, "/api/runs")["runs"]}
    assert set(rows) == {"good", "bomb", "fifo", "fifo-record", "huge", "secrets", "dead", "alive"}
    assert rows["good"]["loss"] == 5.0 and rows["good"]["status"] == "finished"
    assert rows["fifo-record"]["status"] == "unreadable"
    assert "job.json is a FIFO, not a regular file" in rows["fifo-record"]["problem"]
    assert rows["dead"]["status"] == "died"  # job.json still says running
    assert rows["alive"]["status"] == "running"
    assert timed_json(url, "/api/lineage")["nodes"]


def test_a_billion_laughs_config_is_a_problem_not_a_hang(url):
    answer = timed_json(url, "/api/runs/bomb/config")
    assert answer["values"] == {}
    assert any("alias bomb" in problem for problem in answer["problems"]), answer["problems"]
    assert timed_json(url, "/api/runs/good/config")["values"] == {"training.seq_len": 32}


def test_fifos_and_huge_files_are_never_read(url):
    fifo = timed_json(url, "/api/runs/fifo")
    assert "summary.json is a FIFO, not a regular file; it is not read" in fifo["problems"]
    assert any("metrics.jsonl is a FIFO" in p for p in fifo["problems"]), fifo["problems"]
    metrics = timed_json(url, "/api/runs/fifo/metrics", status=403)
    assert "metrics.jsonl is a FIFO" in metrics["error"]
    assert timed_json(url, "/api/runs/fifo/log")["problems"] == [
        "run.log is a FIFO, not a regular file; it is not read"
    ]
    huge = timed_json(url, "/api/runs/huge")
    assert "summary.json is 5120 MiB, more than the 8 MiB the view reads" in huge["problems"]
    assert timed_json(url, "/api/runs/huge/series", status=403)["error"].endswith(
        "metrics.jsonl is 5120 MiB, more than the 4096 MiB the view reads"
    )
    assert timed_json(url, "/api/runs/good/metrics")["rows"] == [{"step": 0, "train/loss": 5.0}]


def test_credentials_are_redacted_by_pattern_in_config_record_and_log(url):
    """By key name, by value shape and by the values of the server's secret environment
    variables, in every answer that shows a run; job keys and ordinary values stay."""
    config = timed_json(url, "/api/runs/secrets/config")
    record = timed_json(url, "/api/runs/secrets")
    log = timed_json(url, "/api/runs/secrets/log")
    diff = timed_json(url, "/api/diff?runs=good&runs=secrets")
    table = timed_json(url, "/api/runs")
    shown = json.dumps([config, record, log, diff, table])
    for secret in SECRET_VALUES:
        assert secret not in shown, secret
    values = config["values"]
    for key in ("logging.auth", "logging.bearer", "logging.wandb.wandb_key",
                "data.dataset_options.pwd", "data.dataset_options.sessionCookie"):  # fmt: skip
        assert values[key] == "<redacted>", key
    assert values["logging.wandb.project"] == "https://<redacted>@wandb.example"
    assert values["logging.wandb.entity"] == "<redacted>"  # a GitHub token, by its shape
    assert values["data.dataset_options.dsn"] == "db/<redacted>"  # the server's secret
    # ordinary values, and the job key, stay readable
    assert values["data.tokenizer"] == "bpe" and values["model.n_experts_per_token"] == 2
    assert values["model.learning_rate"] == 0.0003
    assert record["record"]["key"] == "gpt/train/pretrain"
    rows = {row["name"]: row for row in table["runs"]}
    assert rows["secrets"]["key"] == rows["good"]["key"] == "gpt/train/pretrain"
    changed = record["record"]["history"][0]["changed"]
    assert changed == {"logging.auth": "<redacted>", "data.dataset_options.pwd": "<redacted>"}
    assert log["lines"] == [
        "step 1",
        "login with token=<redacted> at https://<redacted>@x",
        '{"user": "me", "password": "<redacted>"}',
        "run --password <redacted> --steps 3",
        "Authorization: Basic <redacted>",
        "<redacted>",
        "<redacted>",
        "<redacted>",
        "opened db/<redacted>",
        "step 2 loss 4.5",
    ]
    diffs = {row["key"]: row["values"]["secrets"] for row in diff["rows"]}
    assert diffs["data.dataset_options.pwd"] == "<redacted>" and diffs["data.tokenizer"] == "bpe"
    code, _, _ = request(url, "/api/runs/secrets/config")
    assert code == 200


def test_theseus_runs_shows_a_run_that_died_without_a_word(hostile_root):
    done = run_cli(hostile_root, "runs")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:] if line}
    assert rows["dead"][2] == "died" and rows["alive"][2] == "running"
    record = json.loads((hostile_root / "runs" / "dead" / "job.json").read_text())
    assert record["status"] == "running"  # shown as died, never rewritten
