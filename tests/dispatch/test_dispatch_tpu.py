"""The gcp-tpu backend: real gcloud (and the REST client) against a local TPU v2 API server;
the "workers" are the loopback sshd, so the launch on them is real."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from dispatch_helpers import VENV_PYTHON, login, run_status, wait_for
from fake_tpu import TOKEN, FakeTPU

JOB = "core/info"
OVERRIDES: list[str] = []


@pytest.fixture
def tpu(sshds):
    server = FakeTPU(["127.0.0.1"]).start()
    yield server
    server.stop()


def tpu_target(sshds, tpu, tmp, **extra) -> dict:
    server = sshds[0]
    target = {
        "type": "gcp-tpu",
        "project": "theseus-test",
        "zone": "us-central2-b",
        "accelerator_type": "v5litepod-8",
        "runtime_version": "v2-alpha-tpuv5-lite",
        "spot": True,
        "api_endpoint": tpu.url,
        "chip": "v5e",
        "chips_per_node": 8,
        "port": server.port,
        **login(server, tmp, "tpu"),
        "delete_when_done": True,
    }
    target.update(extra)
    return target


def gcloud_env(cli, tmp) -> None:
    cli.env.update(
        CLOUDSDK_CONFIG=str(tmp / "gcloud"),
        CLOUDSDK_AUTH_ACCESS_TOKEN=TOKEN,
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="1",
    )


@pytest.mark.parametrize("use_gcloud", [True, False], ids=["gcloud", "rest"])
def test_tpu_vm_lifecycle(sshds, tpu, cli, tmp_path, use_gcloud):
    if use_gcloud and not os.path.exists("/usr/bin/gcloud"):
        pytest.fail("gcloud is not installed at /usr/bin/gcloud")
    gcloud_env(cli, tmp_path)
    cli.write({"tpu": tpu_target(sshds, tpu, tmp_path, use_gcloud=use_gcloud)})
    done = cli("submit", JOB, *OVERRIDES, "--chip", "v5e", "--name", "tpu-run")
    assert "to tpu [gcp-tpu] on 1 node(s)" in done.stdout
    node = tpu.nodes["theseus-tpu-run"]
    assert (
        node["acceleratorType"] == "v5litepod-8" and node["runtimeVersion"] == "v2-alpha-tpuv5-lite"
    )
    assert node["schedulingConfig"]["spot"] is True
    root = tmp_path / "tpu-root"
    wait_for(lambda: run_status(root, "tpu-run") == "finished", 120, what="finished")
    assert (root / "runs" / "tpu-run" / "info.json").exists()
    assert "process 0 of 1" in cli("logs", "tpu-run").stdout
    status = cli("status", "tpu-run").stdout
    assert "tpu-run  tpu  core/info  finished" in status and "VM deleted" in status
    assert "theseus-tpu-run" not in tpu.nodes  # delete_when_done
    paths = [p for _, p, _ in tpu.requests]
    assert "/v2/projects/theseus-test/locations/us-central2-b/acceleratorTypes/v5litepod-8" in paths


def test_tpu_errors_leave_nothing(sshds, tpu, cli, tmp_path):
    gcloud_env(cli, tmp_path)
    cli.write({"tpu": tpu_target(sshds, tpu, tmp_path, accelerator_type="v9-9999")})
    done = cli("submit", JOB, "--name", "nope", check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: no target can take this run: tpu (gcp-tpu): accelerator type v9-9999 is not offered "
        "in us-central2-b"
    )
    cli.write({"tpu": tpu_target(sshds, tpu, tmp_path)})
    tpu.fail_create = "Quota exhausted for v5litepod-8 in us-central2-b"
    done = cli("submit", JOB, "--name", "quota", check=False)
    assert done.returncode == 2
    assert (
        "gcloud tpu-vm create: RESOURCE_EXHAUSTED: Quota exhausted for v5litepod-8" in done.stderr
    )
    assert not tpu.nodes and not cli.state.exists() and not (tmp_path / "tpu-work").exists()


def test_tpu_cancel_stops_workers_and_deletes_vm(sshds, tpu, cli, tmp_path):
    gcloud_env(cli, tmp_path)
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/bash\nsleep 120\nexec {VENV_PYTHON} "$@"\n')
    slow.chmod(0o755)
    cli.write({"tpu": tpu_target(sshds, tpu, tmp_path, python=str(slow), use_gcloud=False)})
    cli("submit", JOB, "--name", "tpu-cancel")
    pid = cli.record("tpu-cancel")["handle"]["pids"][0]
    os.kill(pid, 0)
    out = cli("cancel", "tpu-cancel").stdout
    assert "worker 0: stopped; deleted TPU VM theseus-tpu-cancel" in out
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not tpu.nodes


def test_the_launch_starts_the_workers_the_plan_lists(sshds, tpu, cli, tmp_path):
    """A v4-16 VM has 2 workers: the plan (no --chips: the slice whole) lists 2, and the
    launch starts processes 0 and 1 of 2, one per worker (each worker's own log says so).
    The workers run ``/bin/true`` as their Python: the launch is what is tested."""
    gcloud_env(cli, tmp_path)
    target = tpu_target(
        sshds, tpu, tmp_path, accelerator_type="v4-16", chip="v4", chips_per_node=4, nodes=2,
        python="/bin/true", use_gcloud=False,
    )  # fmt: skip
    cli.write({"tpu": target})
    plan = cli("submit", JOB, "--name", "pair", "--dry-run").stdout
    (listed,) = re.findall(r"^workers  (\d+), a process each with 4 v4 chip\(s\)", plan, re.M)
    cli("submit", JOB, "--name", "pair")
    handle = cli.record("pair")["handle"]
    launch = Path(handle["launch_dir"])
    workers = range(len(handle["addresses"]))
    wait_for(lambda: all((launch / f"exit.{i}").exists() for i in workers), 60, what="exits")
    started = [
        re.search(r"theseus: process (\d+) of (\d+)", (launch / f"log.{i}").read_text()).groups()
        for i in workers
    ]
    assert int(listed) == len(handle["pids"]) == 2, (plan, handle)
    assert started == [("0", "2"), ("1", "2")], started

    # a slice has its chips: half of it is refused in one line, before anything is made
    done = cli("submit", JOB, "--to", "tpu", "--chips", "4", "--name", "half", check=False)
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: target tpu (gcp-tpu): is one slice of 8 v4 chip(s) on 2 worker(s), all of "
        "which a launch starts: ask for --chips 8 (or leave it out), not --chips 4"
    )
    # a target whose nodes miss the VM's workers plans 1 and would start 2: refused at the
    # launch, the VM it created deleted
    cli.write({"tpu": {**target, "nodes": 1, "chips_per_node": 8}})
    done = cli("submit", JOB, "--name", "mismatch", check=False)
    assert done.returncode == 2, done.stderr
    assert "TPU VM theseus-mismatch (v4-16) has 2 worker(s), and the plan 1" in done.stderr
    assert "theseus-mismatch" not in tpu.nodes and "theseus-half" not in tpu.nodes
