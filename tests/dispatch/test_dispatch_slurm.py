"""The slurm backend against real slurmctld/slurmd daemons (1 node, and 2 emulated nodes)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from dispatch_helpers import COMPILE_ENV, REPO, VENV_PYTHON, run_status, wait_for
from dispatch_servers import free_port

from tests.conftest import host_devices
from tests.train.conftest import TINY

# The job most tests submit (fast: no JAX work); the two-node test trains a tiny GPT.
JOB = "core/info"
OVERRIDES: list[str] = []
OUTPUT = "info.json"
TRAIN_JOB = "gpt/train/pretrain"
TRAIN_OVERRIDES = [
    *TINY,
    "training.total_steps=6",
    "eval.every=0",
    "checkpoint.every=6",  # one checkpoint, at the end
    "logging.peak_flops=1e12",  # no matmul benchmark: MFU is not what this test is about
]
LOSS_FILE = "metrics.jsonl"  # the 2-node losses must match 1 process
LOSS_KEY = "train/loss"


def slurm_target(cluster, tmp, **extra) -> dict:
    target = {
        "type": "slurm",
        "slurm_conf": str(cluster.conf),
        "root": str(tmp / "shared-root"),
        "workdir": str(tmp / "shared-work"),
        "python": VENV_PYTHON,
        "nodes": cluster.nodes,
        "coordinator_port": free_port(),
        "env": {"JAX_PLATFORMS": "cpu"},
    }
    target.update(extra)
    return target


def squeue(cluster) -> str:
    env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
    return subprocess.run(
        ["squeue", "-h", "-o", "%i %j %T"], env=env, capture_output=True, text=True
    ).stdout


def test_single_node_job_completes(slurm1, cli, tmp_path):
    cli.write({"cluster": slurm_target(slurm1, tmp_path)})
    root = tmp_path / "shared-root"
    started = time.monotonic()
    done = cli("submit", JOB, *OVERRIDES, "--name", "s1")
    assert "to cluster [slurm] on 1 node(s)" in done.stdout
    wait_for(lambda: run_status(root, "s1") in ("running", "finished"), 60, what="running")
    print(f"\nSLURM submit-to-running latency: {time.monotonic() - started:.2f} s")
    wait_for(lambda: run_status(root, "s1") == "finished", 120, what="finished")
    assert (root / "runs" / "s1" / OUTPUT).exists()
    job_id = cli.record("s1")["handle"]["job_id"]
    script = (tmp_path / "shared-work" / "launches" / "s1" / "job.sbatch").read_text()
    assert "#SBATCH --job-name=theseus-s1" in script and "srun --kill-on-bad-exit=1" in script
    wait_for(lambda: job_id not in squeue(slurm1), 30, what="job to leave the queue")
    assert (
        f"s1  cluster  {JOB}  finished (run: finished) [job {job_id}" in cli("status", "s1").stdout
    )
    assert "process 0 of 1" in cli("logs", "s1").stdout
    again = cli("submit", JOB, *OVERRIDES, "--name", "s1")
    assert "run s1 already finished on cluster; not launching it again" in again.stdout


def test_sbatch_rejection_surfaces_slurm_message(slurm1, cli, tmp_path):
    cli.write({"cluster": slurm_target(slurm1, tmp_path, mem="999999")})
    done = cli("submit", JOB, "--name", "toobig", check=False)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith("error: sbatch refused the job on cluster: sbatch: error:")
    assert "Memory specification can not be satisfied" in line
    assert not (tmp_path / "shared-work" / "launches" / "toobig").exists()
    assert not cli.state.exists()


def test_cancel_maps_to_scancel(slurm1, cli, tmp_path):
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/bash\nsleep 120\nexec {VENV_PYTHON} "$@"\n')
    slow.chmod(0o755)
    cli.write({"cluster": slurm_target(slurm1, tmp_path, python=str(slow))})
    cli("submit", JOB, "--name", "victim")
    job_id = cli.record("victim")["handle"]["job_id"]
    wait_for(lambda: f"{job_id} theseus-victim RUNNING" in squeue(slurm1), 30, what="RUNNING")
    again = cli("submit", JOB, "--name", "victim")
    assert "already running" in again.stdout and job_id in squeue(slurm1)
    assert f"cancelled run victim on cluster: scancel {job_id}" in cli("cancel", "victim").stdout
    wait_for(lambda: job_id not in squeue(slurm1), 30, what="job to leave the queue")
    assert "victim  cluster  core/info  cancelled" in cli("status", "victim").stdout


def test_submit_over_ssh_login_node(slurm1, sshds, cli, tmp_path):
    server = sshds[0]
    target = slurm_target(
        slurm1, tmp_path, login=f"{server.host}:{server.port}", user="root",
        key_file=str(server.client_key), known_hosts=str(server.known_hosts),
    )  # fmt: skip
    cli.write({"login": target})
    cli("submit", JOB, *OVERRIDES, "--name", "vialogin")
    wait_for(
        lambda: run_status(tmp_path / "shared-root", "vialogin") == "finished", 120, what="finished"
    )
    assert "finished" in cli("status", "vialogin").stdout


def test_solver_explains_per_target(slurm1, cli, tmp_path):
    cli.write(
        {
            "cluster": slurm_target(slurm1, tmp_path),
            "gpus": slurm_target(slurm1, tmp_path, chip="h100", chips_per_node=8, nodes=4),
            "nowhere": slurm_target(slurm1, tmp_path, partition="nosuch"),
        },
        priority=["gpus", "cluster", "nowhere"],
    )
    # the live check (sinfo) is a real submit's: a dry run contacts nothing (below)
    done = cli("submit", JOB, "--nodes", "2", check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: no target can take this run: gpus (slurm): partition (default): 0 usable node(s) "
        "with 8 GRES chip(s), needs 2; cluster (slurm): offers at most 1 node(s), needs 2; "
        "nowhere (slurm): offers at most 1 node(s), needs 2"
    )
    done = cli("submit", JOB, "--chip", "h100", "--chips", "16", "--to", "gpus", check=False)
    assert (
        "target gpus (slurm): partition (default): 0 usable node(s) with 8 GRES chip(s), needs 2"
        in done.stderr
    )
    done = cli("submit", JOB, "--to", "nowhere", check=False)
    assert "target nowhere (slurm): partition nosuch: 0 usable node(s), needs 1" in done.stderr
    assert not cli.state.exists()  # refused before anything was launched or recorded
    # a dry run makes the static fit only (no sinfo): the first target that fits on paper
    done = cli("submit", JOB, "--nodes", "8", "--dry-run", check=False)
    assert done.returncode == 2 and "gpus (slurm): offers at most 4 node(s), needs 8" in done.stderr
    plan = cli("submit", JOB, "--dry-run").stdout
    assert "gpus (slurm, sbatch locally)" in plan and "#SBATCH --nodes=1" in plan
    assert "live check: not made" in plan


def losses(path) -> dict[int, float]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["step"]: r[LOSS_KEY] for r in rows if LOSS_KEY in r}


@pytest.mark.slow
def test_two_nodes_run_jax_distributed(slurm2, cli, tmp_path):
    """A tiny GPT trained data-parallel over 2 SLURM nodes (one CPU device per process,
    jax.distributed over gloo) takes exactly the steps of one process with 2 devices.

    The reference is one process with two forced host devices, so the mesh (data=2), the
    per-device programs and every shard's inputs are the same as the two-node run; what
    differs is only the transport of the cross-device reductions (XLA's in-process
    all-reduce vs gloo). With two participants a reduction is one addition, a + b, which
    IEEE float32 computes identically in either order, so the losses are compared with
    ``==``, not a tolerance. (A one-device reference would sum the batch in another order
    and differ by a few ulps per step.)
    """
    root = tmp_path / "shared-root"
    reference = subprocess.run(  # also tokenizes the corpus into the shared root, once
        [VENV_PYTHON, "-m", "theseus.cli.main", "run", TRAIN_JOB, *TRAIN_OVERRIDES,
         "--root", str(root), "--name", "one"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu",
             "XLA_FLAGS": host_devices(2)},
    )  # fmt: skip
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert "2 cpu devices (data=2" in reference.stderr + reference.stdout
    cache = {k: v for k, v in os.environ.items() if k.startswith(COMPILE_ENV)}
    cli.write({"pair": slurm_target(slurm2, tmp_path, env={"JAX_PLATFORMS": "cpu", **cache})})
    cli("submit", TRAIN_JOB, *TRAIN_OVERRIDES, "--nodes", "2", "--name", "dist")
    launch = tmp_path / "shared-work" / "launches" / "dist"
    wait_for(
        lambda: (launch / "exit.0").exists() and (launch / "exit.1").exists(), 300, what="exits"
    )
    logs = {i: (launch / f"log.{i}").read_text() for i in (0, 1)}
    assert (launch / "exit.0").read_text().strip() == "0", logs
    assert (launch / "exit.1").read_text().strip() == "0", logs
    assert "process 0 of 2" in logs[0] and "process 1 of 2" in logs[1]
    assert "2 cpu devices (data=2" in logs[0], logs[0]  # one CPU device per task, one global mesh
    run_dir = root / "runs" / "dist"
    expected = losses(root / "runs" / "one" / LOSS_FILE)
    assert sorted(expected) == list(range(6)), expected
    assert losses(run_dir / LOSS_FILE) == expected
    record = json.loads((run_dir / "job.json").read_text())
    assert record["status"] == "finished"
    assert record["dispatched"]["target"] == "pair" and record["dispatched"]["type"] == "slurm"
    assert record["dispatched"]["job_id"].isdigit()  # the SLURM job that ran it
    assert f"dist  pair  {TRAIN_JOB}  finished" in cli("status", "dist").stdout
