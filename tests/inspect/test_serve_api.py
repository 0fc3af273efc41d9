"""`theseus serve`'s JSON API over real runs, against a real server process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.inspect.serve_helpers import get_json, request, served
from tests.train.conftest import run_cli, theseus_cmd


@pytest.fixture(scope="module")
def api(two_runs: Path, tmp_path_factory):
    """A copy of the two real runs, plus: ``gamma`` (beta's folder with credentials in its
    config), ``broken`` (a damaged job.json) and ``escape`` (a symlink out of the root)."""
    root = tmp_path_factory.mktemp("serve") / "root"
    shutil.copytree(two_runs, root, symlinks=True)
    runs = root / "runs"
    shutil.copytree(runs / "beta", runs / "gamma")
    record = json.loads((runs / "gamma" / "job.json").read_text())
    (runs / "gamma" / "job.json").write_text(json.dumps({**record, "name": "gamma"}))
    config = (runs / "gamma" / "config.yaml").read_text()
    assert "  dataset_options: {}\n" in config
    config = config.replace(
        "  dataset_options: {}\n",
        "  dataset_options:\n    hf_token: hf_SECRET1\n    revision: main\n",
    )
    config += "auth:\n  password: SECRET2\n  user: me\n"
    (runs / "gamma" / "config.yaml").write_text(config)
    (runs / "broken").mkdir()
    (runs / "broken" / "job.json").write_text('{"key": "gpt/train/pretrain", ')
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "job.json").write_text(json.dumps({"key": "x", "status": "SECRET3"}))
    (outside / "config.yaml").write_text("leak: SECRET4\n")
    os.symlink(outside, runs / "escape")
    (outside / "metrics.jsonl").write_text('{"step": 1, "train/loss": 777.0}\n')
    (runs / "sneaky").mkdir()  # a folder inside whose files point outside
    os.symlink(outside / "job.json", runs / "sneaky" / "job.json")
    os.symlink(outside / "metrics.jsonl", runs / "sneaky" / "metrics.jsonl")
    (runs / "long").mkdir()  # 5,000 steps with one spike and one NaN
    (runs / "long" / "job.json").write_text(json.dumps({"key": "x/train", "status": "running"}))
    with (runs / "long" / "metrics.jsonl").open("w") as out:
        for step in range(5000):
            loss = 100.0 if step == 3333 else (float("nan") if step == 4000 else 3 - step / 5000)
            out.write(json.dumps({"step": step, "train/loss": loss}) + "\n")
    with served(root) as url:
        yield url, root


def metric_rows(root: Path, name: str) -> list[dict]:
    lines = (root / "runs" / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_runs_table_matches_the_runs_on_disk(api):
    url, root = api
    answer = get_json(url, "/api/runs")
    assert answer["root"] == str(root.resolve())
    rows = {row["name"]: row for row in answer["runs"]}
    assert "escape" not in rows  # a symlink out of the root is not one of its runs
    assert {"alpha", "beta", "gamma", "broken", "long"} <= set(rows)
    for name in ("alpha", "beta"):
        record = json.loads((root / "runs" / name / "job.json").read_text())
        losses = [
            (r["step"], r["train/loss"]) for r in metric_rows(root, name) if "train/loss" in r
        ]
        row = rows[name]
        assert (row["key"], row["status"], row["host"]) == (
            record["key"],
            record["status"],
            record["host"],
        )
        # the step reached: the last checkpoint and final evaluation (4), one past the last
        # training loss, which is logged as the state after 3 updates
        assert row["loss"] == losses[-1][1] and losses[-1][0] == 3
        steps = [r["step"] for r in metric_rows(root, name)]
        assert row["step"] == record["checkpoint_step"] == max(steps) == 4
        assert row["started"] == record["started"] and row["dispatched"] is None
    assert rows["beta"]["parent"] == "alpha@2" and rows["alpha"]["parent"] is None
    assert rows["broken"]["status"] == "unreadable" and "job.json" in rows["broken"]["problem"]
    assert (rows["long"]["step"], rows["long"]["loss"]) == (4999, 3 - 4999 / 5000)
    tokenize = [r for r in rows.values() if r["key"] == "data/tokenize/python-stdlib"]
    assert tokenize and tokenize[0]["status"] == "finished"


def test_run_details_checkpoints_evaluations_and_lineage(api):
    url, root = api
    alpha = get_json(url, "/api/runs/alpha")
    on_disk = sorted(int(p.name) for p in (root / "runs/alpha/checkpoints").iterdir())
    assert alpha["checkpoints"] == on_disk == [2, 4]
    assert alpha["record"]["status"] == "finished" and alpha["problems"] == []
    assert sorted(alpha["children"]) == ["beta", "gamma"] and alpha["lineage"] == []
    assert alpha["used_by"] == [{"run": "judge", "via": "evaluate.checkpoint", "step": 4}]
    steps = [e["step"] for e in alpha["evaluations"]]
    assert steps == [2, 4]  # eval.every=2 with eval.tasks=[val-ppl]
    for evaluation in alpha["evaluations"]:
        saved = json.loads((root / "runs/alpha" / evaluation["file"]).read_text())
        assert evaluation["results"] == saved["results"] and "val-ppl" in saved["results"]
    assert alpha["summary"] == json.loads((root / "runs/alpha/summary.json").read_text())
    beta = get_json(url, "/api/runs/beta")
    assert beta["lineage"] == ["alpha@2"]  # a branch keeps its parent's eval.tasks
    assert [e["step"] for e in beta["evaluations"]] == [4]
    judge = get_json(url, "/api/runs/judge")  # an evaluation job: results.json
    saved = json.loads((root / "runs/judge/results.json").read_text())
    assert judge["evaluations"] == [
        {"step": 4, "file": "results.json", "source": saved["source"], "results": saved["results"]}
    ]


def test_metrics_cursor_follows_appends_and_starts_over_on_a_rewrite(api):
    url, root = api
    path = root / "runs" / "gamma" / "metrics.jsonl"
    first = get_json(url, "/api/runs/gamma/metrics")
    assert first["rows"] == metric_rows(root, "gamma") and first["reset"] is False
    offset, version = first["offset"], first["version"]
    assert offset == len(first["rows"])
    nothing = get_json(url, f"/api/runs/gamma/metrics?offset={offset}&version={version}")
    assert nothing["rows"] == [] and nothing["offset"] == offset

    with path.open("a") as out:  # a live run appends; the NaN is a diverged step
        out.write('{"step": 7, "train/loss": 1.5, "phase": "warmup", "resumed": true}\n')
        out.write('{"step": 8, "train/loss": NaN}\n')
        out.write("this line is damaged\n")
        out.write('{"step": 9, "train/loss"')  # a line still being written
    grown = get_json(url, f"/api/runs/gamma/metrics?offset={offset}&version={version}")
    assert grown["rows"] == [
        {"step": 7, "train/loss": 1.5, "phase": "warmup", "resumed": True},
        {"step": 8, "train/loss": "NaN"},
    ]
    assert grown["unreadable_lines"] == 1 and grown["version"] == version
    details = get_json(url, "/api/runs/gamma")
    problem = f"metrics.jsonl: skipped unreadable lines {offset + 3} (not JSON)"
    assert details["problems"] == [problem]  # the line being written is not a problem
    with path.open("a") as out:
        out.write(": 0.5}\n")
    finished = get_json(url, f"/api/runs/gamma/metrics?offset={grown['offset']}&version={version}")
    assert finished["rows"] == [{"step": 9, "train/loss": 0.5}]
    since = get_json(url, "/api/runs/gamma/metrics?since=7")
    assert [r["step"] for r in since["rows"]] == [8, 9]

    replacement = path.with_name("metrics.new")  # a resume rewrites the file
    replacement.write_text('{"step": 0, "train/loss": 2.0}\n')
    os.replace(replacement, path)
    reset = get_json(url, f"/api/runs/gamma/metrics?offset={finished['offset']}&version={version}")
    assert reset["reset"] is True and reset["version"] != version
    assert reset["rows"] == [{"step": 0, "train/loss": 2.0}] and reset["offset"] == 1


def test_series_are_decimated_keeping_the_envelope_the_ends_and_the_gaps(api):
    url, _ = api
    full = get_json(url, "/api/runs/beta/series")  # short: every point, every metric
    rows = metric_rows(api[1], "beta")
    for metric in ("train/loss", "val/loss"):
        kept = [(r["step"], r[metric]) for r in rows if metric in r]
        curve = full["series"][metric]
        assert list(zip(curve["x"], curve["y"], strict=True)) == kept
    assert full["offset"] == len(rows)

    long = get_json(url, "/api/runs/long/series?metric=train/loss&max_points=200")
    curve = long["series"]["train/loss"]
    assert (
        curve["points"] == 5000
        and len(curve["x"]) <= 202
        and list(long["series"]) == ["train/loss"]
    )
    assert curve["x"][0] == 0 and curve["x"][-1] == 4999 and curve["x"] == sorted(curve["x"])
    assert 100.0 in curve["y"] and "NaN" in curve["y"]  # the spike and the gap survive
    numbers = [y for y in curve["y"] if isinstance(y, float)]
    assert min(numbers) == 3 - 4999 / 5000


def test_config_is_shown_with_credentials_redacted(api):
    url, root = api
    beta = get_json(url, "/api/runs/beta/config")
    assert beta["text"] == (root / "runs/beta/config.yaml").read_text()
    assert beta["values"]["optimizer.learning_rate"] == 0.003
    assert beta["values"]["data.tokenizer"] == "bpe"  # not a credential
    gamma = get_json(url, "/api/runs/gamma/config")
    for secret in ("SECRET1", "SECRET2"):
        assert secret not in gamma["text"] and secret not in json.dumps(gamma["values"])
    assert gamma["values"]["data.dataset_options.hf_token"] == "<redacted>"
    assert gamma["values"]["data.dataset_options.revision"] == "main"
    assert gamma["values"]["auth.password"] == "<redacted>"
    assert gamma["values"]["auth.user"] == "<redacted>"  # under a key named auth (issue 24)
    assert yaml.safe_load(gamma["text"])["data"]["dataset_options"]["hf_token"] == "<redacted>"


def flat(node, prefix=""):
    if isinstance(node, dict) and node:
        out = {}
        for key, value in node.items():
            out.update(flat(value, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: node}


def test_diff_lists_exactly_the_keys_that_differ(api):
    url, root = api
    answer = get_json(url, "/api/diff?runs=alpha&runs=beta")
    configs = {
        n: flat(yaml.safe_load((root / "runs" / n / "config.yaml").read_text()))
        for n in ("alpha", "beta")
    }
    differing = {k for k in configs["alpha"] if configs["alpha"][k] != configs["beta"].get(k)}
    differing |= set(configs["beta"]) - set(configs["alpha"])
    assert {row["key"] for row in answer["rows"]} == differing
    assert "optimizer.learning_rate" in differing
    rate = next(r for r in answer["rows"] if r["key"] == "optimizer.learning_rate")
    assert rate["values"] == {"alpha": 0.0006, "beta": 0.003}
    assert answer["same"] + len(answer["rows"]) == len(set(configs["alpha"]) | set(configs["beta"]))
    assert get_json(url, "/api/diff?runs=alpha", status=400)["error"].startswith("diff needs 2")


def test_lineage_has_an_edge_per_branch(api):
    url, _ = api
    graph = get_json(url, "/api/lineage")
    edges = sorted((e["from"], e["to"], e["step"], e["via"]) for e in graph["edges"])
    assert edges == [  # gamma is a copy of beta: a branch of alpha@2
        ("alpha", "beta", 2, "branch"),
        ("alpha", "gamma", 2, "branch"),
        ("alpha", "judge", 4, "evaluate.checkpoint"),
    ]
    assert all(e["parent_known"] for e in graph["edges"])
    statuses = {n["name"]: n["status"] for n in graph["nodes"]}
    assert statuses["alpha"] == "finished" and statuses["broken"] == "unreadable"


def test_log_tail_is_the_end_of_run_log(api):
    url, root = api
    lines = (root / "runs/alpha/logs/run.log").read_text().splitlines()
    answer = get_json(url, "/api/runs/alpha/log?lines=3")
    assert answer["lines"] == lines[-3:] and answer["truncated"] is True


def test_a_malformed_run_is_shown_as_malformed_never_a_500(api):
    url, _ = api
    broken = get_json(url, "/api/runs/broken")
    assert broken["record"] is None and "not valid JSON" in broken["problems"][0]
    assert get_json(url, "/api/runs/broken/config")["problems"] == ["config.yaml is missing"]
    assert get_json(url, "/api/runs/broken/metrics")["rows"] == []
    status, headers, body = request(url, "/runs/broken")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert get_json(url, "/api/runs/nosuchrun", status=404)["error"].startswith("no run named")


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/..%2F..%2Fetc/config",
        "/api/runs/../../etc/passwd",
        "/api/runs/%2e%2e/config",
        "/api/runs/..",
        "/static/..%2Fapp.py",
        "/static/root_view.py",
        "/runs/../../../etc/passwd",
        "/api/runs/alpha/checkpoints",
        "/api/runs/alpha/job.json",
    ],
)
def test_paths_outside_what_is_served_are_refused(api, path):
    url, _ = api
    status, _, body = request(url, path)
    assert status in (403, 404), (path, status, body[:200])
    assert b"root:" not in body and b"SECRET" not in body


def test_a_run_folder_or_file_that_resolves_outside_the_root_is_refused(api):
    url, _ = api
    for path in ("/api/runs/escape", "/api/runs/escape/config", "/api/runs/escape/metrics"):
        status, _, body = request(url, path)
        assert status == 403 and b"outside" in body and b"SECRET" not in body
    for path in ("/api/runs", "/api/lineage", "/api/runs/sneaky", "/api/runs/sneaky/series"):
        body = request(url, path)[2]
        assert b"SECRET" not in body and b"777" not in body, path
    sneaky = next(r for r in get_json(url, "/api/runs")["runs"] if r["name"] == "sneaky")
    assert sneaky["status"] == "unreadable"
    assert sneaky["problem"] == "job.json resolves outside the root"
    details = get_json(url, "/api/runs/sneaky")
    assert (
        details["record"] is None and "job.json resolves outside the root" in details["problems"][0]
    )
    assert request(url, "/api/runs/sneaky/metrics")[0] == 403


def test_the_view_is_read_only_and_answers_only_localhost(api):
    url, _ = api
    for method in ("POST", "PUT", "DELETE"):
        assert request(url, "/api/runs", method=method)[0] == 405
    status, headers, _ = request(url, "/api/runs", {"Host": "attacker.example:80"})
    assert status == 403  # a DNS-rebinding page cannot read runs
    status, headers, _ = request(url, "/")
    assert status == 200 and headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in headers["content-security-policy"]
    status, headers, body = request(url, "/static/plotly.min.js")
    assert status == 200 and len(body) > 1_000_000  # served from the plotly wheel


def test_every_request_needs_the_token_when_one_is_set(two_runs):
    with served(two_runs, "--token", "tok-123") as url:
        assert url.endswith("/?token=tok-123")
        for path in ("/", "/api/runs", "/static/common.js", "/runs/alpha", "/nope"):
            assert request(url, path)[0] == 403, path
            assert request(url, path, {"Authorization": "Bearer wrong"})[0] == 403, path
        assert request(url, "/api/runs?token=wrong")[0] == 403
        status, headers, _ = request(url, "/?token=tok-123")
        assert status == 200 and "theseus_token=tok-123" in headers["set-cookie"]
        assert "HttpOnly" in headers["set-cookie"]
        assert get_json(url, "/api/runs", Cookie="theseus_token=tok-123")["runs"]
        assert get_json(url, "/api/runs", Authorization="Bearer tok-123")["runs"]


def test_token_auto_makes_a_long_random_token(two_runs):
    with served(two_runs, "--token", "auto") as url:
        token = url.rsplit("?token=", 1)[1]
        assert len(token) >= 32 and token != "auto"
        assert request(url, "/api/runs")[0] == 403
        assert get_json(url, "/api/runs", Authorization=f"Bearer {token}")["runs"]


def test_without_the_serve_extra_the_error_names_the_pip_command(two_runs, tmp_path):
    shadow = tmp_path / "shadow" / "starlette"  # an environment where starlette is absent
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}:{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run(
        theseus_cmd("serve", "--root", str(two_runs)), capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "theseus serve needs the starlette package: pip install 'theseus-core[serve]'" in (
        result.stderr
    )


def test_a_root_without_runs_yet_is_served_empty(tmp_path):
    with served(tmp_path) as url:  # started before the first run: fills in as runs start
        assert get_json(url, "/api/runs") == {"root": str(tmp_path.resolve()), "runs": []}
        assert get_json(url, "/api/lineage") == {"nodes": [], "edges": []}
        assert request(url, "/")[0] == 200


def test_binding_mistakes_are_one_line_errors(two_runs, tmp_path):
    public = run_cli(two_runs, "serve", "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert public.returncode == 2 and "Traceback" not in public.stderr
    assert "--host 0.0.0.0 is not a loopback address" in public.stderr
    assert "--token" in public.stderr and len(public.stderr.strip().splitlines()) == 1
    missing = run_cli(tmp_path / "nowhere", "serve", "--port", "0", timeout=60)
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    assert str(tmp_path / "nowhere") in missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = run_cli(two_runs, "serve", "--port", str(port), timeout=60)
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
