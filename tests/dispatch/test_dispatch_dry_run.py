"""``theseus submit --dry-run`` contacts nothing: no TPU API, no gcloud account, no SSH host.

Before (issue 35), the live check ran in a dry run too: a ``gcp-tpu`` target's stopped at
``gcloud tpu-vm accelerator-types: You do not currently have an active account selected``
(the REST client at ``the TPU REST API needs an access token``), an ``ssh`` target's at
``cannot connect: Name or service not known``. Without ``--dry-run`` the live check still
runs and still refuses, in one line, before anything is written.
"""

from __future__ import annotations

import os
import shutil

import pytest
from dispatch_helpers import CLI

JOB = "core/info"


def tpu(use_gcloud: bool) -> dict:
    return {
        "type": "gcp-tpu", "project": "nobody", "zone": "us-east5-a",
        "accelerator_type": "v5p-128", "runtime_version": "v2-alpha-tpuv5", "chip": "v5p",
        "chips_per_node": 4, "nodes": 16, "root": "/mnt/shared/theseus", "group": "tpu",
        "use_gcloud": use_gcloud, "access_token_env": "THESEUS_TEST_NO_SUCH_TOKEN",
        "timeout": 5.0,
    }  # fmt: skip


SSH = {
    "type": "ssh", "hosts": ["h100-box.invalid"], "chip": "h100", "chips_per_node": 8,
    "root": "/data/theseus", "connect_timeout": 5.0,
}  # fmt: skip


@pytest.fixture
def offline(tmp_path) -> CLI:
    cli = CLI(tmp_path)
    for name in list(cli.env):
        if name.startswith(("CLOUDSDK_", "GOOGLE_")) or "TOKEN" in name:
            del cli.env[name]
    (tmp_path / "gcloud").mkdir()
    cli.env["CLOUDSDK_CONFIG"] = str(tmp_path / "gcloud")  # no account, no credentials
    return cli


@pytest.mark.parametrize("use_gcloud", [True, False], ids=["gcloud", "rest"])
def test_a_tpu_dry_run_needs_no_credentials(offline, use_gcloud):
    if use_gcloud and not shutil.which("gcloud"):
        pytest.fail("gcloud is not installed: run `bash tests/dispatch/services.sh`")
    offline.write({"v5p": tpu(use_gcloud)})
    done = offline("submit", JOB, "--to", "v5p", "--chips", "64", "--name", "big", "--dry-run")
    api = "gcloud" if use_gcloud else "REST"
    assert f"target   v5p (gcp-tpu via {api})" in done.stdout
    assert "TPU VM   theseus-big: v5p-128, v2-alpha-tpuv5, us-east5-a" in done.stdout
    assert "workers  16, a process each with 4 v5p chip(s)" in done.stdout
    assert "live check: not made" in done.stdout
    assert not offline.state.exists()

    # a real submit makes the live check, which needs the credentials, and says so
    done = offline("submit", JOB, "--to", "v5p", "--chips", "64", "--name", "big", check=False)
    assert done.returncode == 2, done.stderr
    expected = (
        "You do not currently have an active account selected"
        if use_gcloud
        else "the TPU REST API needs an access token in $THESEUS_TEST_NO_SUCH_TOKEN"
    )
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not offline.state.exists()


def test_a_slice_is_asked_for_whole_and_a_host_by_whole_workers(offline):
    """A v5p-128 VM starts its 16 workers whatever --chips says: 48 (12 workers) and 50
    (no whole number of 4-chip workers) are refused in one line; so is 12 GPUs on hosts of
    8 (a worker takes its host's 8)."""
    offline.write({"v5p": tpu(use_gcloud=False), "box": {**SSH, "nodes": 2}})
    for chips in ("48", "50"):
        done = offline("submit", JOB, "--to", "v5p", "--chips", chips, "--dry-run", check=False)
        assert done.returncode == 2 and done.stderr.strip() == (
            "error: target v5p (gcp-tpu): is one slice of 64 v5p chip(s) on 16 worker(s), all "
            f"of which a launch starts: ask for --chips 64 (or leave it out), not --chips {chips}"
        ), done.stderr
    done = offline("submit", JOB, "--to", "box", "--chips", "12", "--dry-run", check=False)
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: target box (ssh): gives each worker its node's 8 h100 chip(s), so --chips 12 "
        "is no whole number of workers (ask for 8 or 16)"
    ), done.stderr
    assert not offline.state.exists()


def test_an_ssh_dry_run_connects_to_nothing(offline):
    offline.write({"box": SSH})
    done = offline("submit", JOB, "--to", "box", "--dry-run")
    assert "target  box (ssh)" in done.stdout and "hosts   h100-box.invalid" in done.stdout
    assert "live check: not made" in done.stdout
    done = offline("submit", JOB, "--to", "box", check=False)
    assert done.returncode == 2 and "h100-box.invalid" in done.stderr
    assert "cannot connect" in done.stderr
    assert not os.path.exists(offline.state)
