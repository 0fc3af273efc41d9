"""The ssh backend against real sshd daemons on 127.0.0.1 and 127.0.0.2."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from dispatch_helpers import COMPILE_ENV, REPO, VENV_PYTHON, run_status, ssh_target, wait_for

from tests.core.plugin_factory import write_plugin
from tests.train.conftest import TINY, final_params, train_losses

# The job most tests submit (fast: no JAX work), and its overrides.
JOB = "core/info"
OVERRIDES: list[str] = []
OUTPUT = "info.json"  # a file the job writes in its run directory
TRAIN_JOB = "gpt/train/pretrain"  # the resume test trains a tiny GPT
SECRET = "sk-" + uuid.uuid4().hex  # made at run time: the bundle must not contain it


def slow_python(tmp: Path, seconds: int) -> str:
    """A Python that first sleeps: a stand-in for a long job, to watch, cancel, resubmit."""
    path = tmp / "slow-python"
    path.write_text(f'#!/bin/bash\nsleep {seconds}\nexec {VENV_PYTHON} "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_submit_runs_to_completion(sshds, cli, tmp_path, monkeypatch):
    cli.write(
        {"box": ssh_target(sshds[0], tmp_path, secrets=["WANDB_API_KEY"], env={"MY_FLAG": "1"})}
    )
    cli.env["WANDB_API_KEY"] = SECRET
    root = tmp_path / "remote-root"
    started = time.monotonic()
    done = cli("submit", JOB, *OVERRIDES, "--to", "auto", "--name", "first")
    assert "submitted run first" in done.stdout and "to box [ssh]" in done.stdout
    wait_for(lambda: run_status(root, "first") in ("running", "finished"), 60, what="running")
    latency = time.monotonic() - started
    print(f"\nSSH submit-to-running latency: {latency:.2f} s")
    followed = cli("logs", "first", "-f").stdout  # returns when the process ends
    assert "run first:" in followed  # the job's last line
    assert run_status(root, "first") == "finished"

    run_dir = root / "runs" / "first"
    assert (run_dir / OUTPUT).exists() and (run_dir / "config.yaml").exists()
    record = json.loads((run_dir / "job.json").read_text())
    assert record["dispatched"] == {"target": "box", "type": "ssh"}  # shown by theseus serve
    status = cli("status", "first").stdout
    assert "first  box  core/info  finished (run: finished)" in status
    assert cli("status").stdout.startswith("first  box  core/info  finished")
    logs = cli("logs", "first").stdout
    assert "process 0 of 1" in logs and "run first:" in logs

    launch = tmp_path / "remote-work" / "launches" / "first"
    secrets_file = launch / "secrets.env"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert SECRET in secrets_file.read_text()
    # the secret is nowhere else: launch files, logs, run outputs, bundle, local state
    for directory in (launch, run_dir, tmp_path / "remote-work" / "bundles", cli.state):
        for path in directory.rglob("*"):
            if path.is_file() and path != secrets_file:
                assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in done.stdout + done.stderr + logs + followed
    record = cli.record("first")
    assert record["target"] == "box" and record["job"] == JOB and record["handle"]["pids"]
    assert stat.S_IMODE((cli.state / "first.json").stat().st_mode) == 0o600


def test_resubmit_is_idempotent_and_cancel_stops(sshds, cli, tmp_path):
    slow = ssh_target(sshds[0], tmp_path, python=slow_python(tmp_path, 60))
    cli.write({"box": slow})
    cli("submit", JOB, *OVERRIDES, "--name", "long")
    pid = cli.record("long")["handle"]["pids"][0]
    os.kill(pid, 0)  # alive, detached from the SSH session that started it
    again = cli("submit", JOB, *OVERRIDES, "--name", "long")
    assert "run long is already running on box; not launching it again" in again.stdout
    assert cli.record("long")["handle"]["pids"] == [pid]
    assert "running" in cli("status", "long").stdout
    # a submission interrupted before its local record was written: the rerun finds the run
    (cli.state / "long.json").unlink()
    again = cli("submit", JOB, *OVERRIDES, "--name", "long")
    assert "already running" in again.stdout and cli.record("long")["handle"]["pids"] == [pid]
    # one name, one place: the same run cannot start on a second target meanwhile
    cli.write({"box": slow, "other": ssh_target(sshds[0], tmp_path, workdir=str(tmp_path / "w2"))})
    refused = cli("submit", JOB, *OVERRIDES, "--to", "other", "--name", "long", check=False)
    assert refused.stderr.strip() == (
        "error: run long is starting on target box; cancel it or choose another --name"
    )
    assert not (tmp_path / "w2").exists()

    out = cli("cancel", "long").stdout
    assert "cancelled run long on box" in out and "stopped" in out
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "cancelled" in cli("status", "long").stdout
    # resubmitting a cancelled run launches it again (resumes under the same name)
    cli.write({"box": ssh_target(sshds[0], tmp_path)})
    cli("submit", JOB, *OVERRIDES, "--name", "long")
    root = tmp_path / "remote-root"
    wait_for(lambda: run_status(root, "long") == "finished", 120, what="finished")
    previous = list((tmp_path / "remote-work" / "launches").glob("long.*"))
    assert len(previous) == 1, "the cancelled attempt's launch directory is kept aside"


def test_quoting_no_shell_injection(sshds, cli, tmp_path):
    nasty = "a; touch pwned $(touch pwned) `touch pwned`'\""
    root = tmp_path / f"root {nasty}"
    cli.write({"box": ssh_target(sshds[0], tmp_path, root=str(root), env={"NOTE": nasty})})
    refused = cli("submit", JOB, "--name", "x; touch pwned", check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith("error: run name 'x; touch pwned' is invalid")
    refused = cli("submit", JOB, "--name", "$(touch pwned)", check=False)
    assert refused.returncode == 2 and "is invalid" in refused.stderr
    assert not (tmp_path / "remote-work").exists()

    cli("submit", JOB, *OVERRIDES, "--name", "quoted")
    wait_for(lambda: run_status(root, "quoted") == "finished", 120, what="finished")
    assert (root / "runs" / "quoted" / OUTPUT).exists()  # the odd root was used literally
    for base in (tmp_path, REPO, Path.home()):
        assert (
            not list(base.glob("**/pwned")) if base == tmp_path else not (base / "pwned").exists()
        )
    bundles = list((tmp_path / "remote-work" / "bundles").iterdir())
    assert not any((b / "pwned").exists() for b in bundles)


def test_a_host_without_the_shared_mount_does_not_start(sshds, cli, tmp_path):
    """``root_mount``: a folder that is not a mount point stops the host before the job
    (exit 93, the log names it, nothing written under the root); a mounted one (``/proc``,
    a mount point on every Linux host) lets it run. The root's own characters never run,
    in the message that names it either."""
    unmounted = tmp_path / "not-a-mount"
    unmounted.mkdir()
    root = tmp_path / "root $(touch pwned) `touch pwned`;touch pwned;'\""
    cli.write({"box": ssh_target(sshds[0], tmp_path, root=str(root), root_mount=str(unmounted))})
    cli("submit", JOB, "--name", "nomount")
    wait_for(lambda: "failed" in cli("status", "nomount").stdout, 60, what="failed")
    exit_file = tmp_path / "remote-work" / "launches" / "nomount" / "exit.0"
    assert exit_file.read_text().strip() == "93"
    log = cli("logs", "nomount").stdout
    assert f"theseus: {unmounted} is not mounted on" in log and "not starting" in log
    assert f"and the root {root} is on it" in log
    assert not (root / "runs" / "nomount").exists()
    for base in (tmp_path, Path.home(), REPO, Path("/")):
        assert not (base / "pwned").exists() and not list(tmp_path.rglob("pwned"))

    cli.write({"box": ssh_target(sshds[0], tmp_path, root_mount="/proc")})
    cli("submit", JOB, "--name", "mounted")
    wait_for(lambda: run_status(tmp_path / "remote-root", "mounted") == "finished", 120,
             what="finished")  # fmt: skip


def test_dry_run_touches_nothing(sshds, cli, tmp_path):
    cli.write({"box": ssh_target(sshds[0], tmp_path, secrets=["WANDB_API_KEY"])})
    cli.env["WANDB_API_KEY"] = SECRET
    done = cli("submit", JOB, *OVERRIDES, "--name", "planned", "--dry-run")
    assert SECRET not in done.stdout + done.stderr
    assert "target  box (ssh)" in done.stdout
    assert "--root" in done.stdout and "uv sync" in done.stdout
    assert "files from" in done.stdout
    assert not (tmp_path / "remote-work").exists() and not cli.state.exists()


def test_unknown_host_key_is_refused_unless_opted_out(sshds, cli, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    cli.write({"box": ssh_target(sshds[0], tmp_path, known_hosts=str(empty))})
    done = cli("submit", JOB, "--name", "hk", check=False)
    assert done.returncode == 2
    assert f"host key not in {empty}" in done.stderr
    assert not (tmp_path / "remote-work").exists() and not cli.state.exists()

    cli.write(
        {
            "box": ssh_target(
                sshds[0], tmp_path, known_hosts=str(empty), insecure_skip_host_key_check=True
            )
        }
    )
    cli("submit", JOB, "--name", "hk")
    assert cli.record("hk")["target"] == "box"
    assert empty.read_text() == "", "an opted-out check does not write known_hosts"


def test_wrong_host_key_is_refused(sshds, cli, tmp_path):
    server = sshds[0]
    other = tmp_path / "other_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}")
    forged = tmp_path / "forged_known_hosts"
    forged.write_text(
        f"[{server.host}]:{server.port} "
        + " ".join((tmp_path / "other_key.pub").read_text().split()[:2])
        + "\n"
    )
    cli.write({"box": ssh_target(sshds[0], tmp_path, known_hosts=str(forged))})
    done = cli("submit", JOB, "--name", "forged", check=False)
    assert done.returncode == 2 and "host key does not match" in done.stderr


def test_refused_key_and_unreachable_host_fail_fast_and_clean(sshds, cli, tmp_path):
    stranger = tmp_path / "stranger"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {stranger}")
    cli.write({"box": ssh_target(sshds[0], tmp_path, key_file=str(stranger))})
    done = cli("submit", JOB, "--to", "box", "--name", "refused", check=False)
    assert done.returncode == 2
    assert "authentication refused" in done.stderr and len(done.stderr.strip().splitlines()) == 1

    # a host that accepts TCP but never speaks SSH: bounded by connect_timeout
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True).start()
    cli.write(
        {
            "box": ssh_target(
                sshds[0],
                tmp_path,
                hosts=[f"127.0.0.1:{silent.getsockname()[1]}"],
                connect_timeout=2,
            )
        }
    )
    started = time.monotonic()
    done = cli("submit", JOB, "--to", "box", "--name", "silent", check=False)
    elapsed = time.monotonic() - started
    silent.close()
    assert done.returncode == 2 and "box (ssh): " in done.stderr, done.stderr
    assert elapsed < 15, elapsed
    assert not (tmp_path / "remote-work").exists() and not cli.state.exists()


def test_two_hosts_run_one_distributed_job(sshds, cli, tmp_path):
    a, b = sshds
    target = ssh_target(
        sshds[0],
        tmp_path,
        hosts=[f"{a.host}:{a.port}", f"{b.host}:{b.port}"],
        nodes=2,
        coordinator_port=0,
    )
    from dispatch_servers import free_port

    target["coordinator_port"] = free_port()
    target["env"] = {"JAX_PLATFORMS": "cpu"}
    cli.write({"pair": target})
    cli("submit", JOB, *OVERRIDES, "--nodes", "2", "--name", "pair")
    launch = tmp_path / "remote-work" / "launches" / "pair"
    wait_for(
        lambda: (launch / "exit.0").exists() and (launch / "exit.1").exists(), 120, what="exits"
    )
    logs = "\n".join(f"--- log.{i}\n{(launch / f'log.{i}').read_text()}" for i in (0, 1))
    assert (launch / "exit.0").read_text().strip() == "0", logs
    assert (launch / "exit.1").read_text().strip() == "0", logs
    log1 = (launch / "log.1").read_text()
    assert "process 1 of 2" in log1
    info = json.loads((tmp_path / "remote-root" / "runs" / "pair" / OUTPUT).read_text())
    assert len(info["devices"]) == 2, info["devices"]
    assert "pair  pair  core/info  finished" in cli("status", "pair").stdout


@pytest.mark.slow
def test_real_bootstrap_with_uv_sync(sshds, cli, tmp_path):
    """No reused Python: the bootstrap finds (or installs) uv and runs `uv sync --frozen`."""
    # the machine's TLS settings (a proxy CA, say) travel like any other target env
    tls = {
        k: os.environ[k]
        for k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy")
        if k in os.environ
    }
    uv = {"uv": shutil.which("uv")} if shutil.which("uv") else {}  # else found or installed there
    cli.write({"box": ssh_target(sshds[0], tmp_path, python=None, env=tls, **uv)})
    root = tmp_path / "remote-root"
    launch = tmp_path / "remote-work" / "launches" / "synced"
    started = time.monotonic()
    cli("submit", JOB, *OVERRIDES, "--name", "synced")
    wait_for(
        lambda: (
            run_status(root, "synced") in ("running", "finished") or (launch / "exit.0").exists()
        ),
        400,
        what="running",
    )
    print(f"\nSSH submit-to-running latency with uv sync: {time.monotonic() - started:.2f} s")
    wait_for(lambda: (launch / "exit.0").exists(), 120, what="the bootstrap to end")
    log = (launch / "log.0").read_text()
    assert (launch / "exit.0").read_text().strip() == "0", log
    assert run_status(root, "synced") == "finished"
    assert "theseus: uv sync --frozen --group cpu" in log, log
    (bundle_dir,) = (tmp_path / "remote-work" / "bundles").iterdir()
    venv_python = bundle_dir / ".venv" / "bin" / "python"
    assert venv_python.exists()
    assert (bundle_dir / "uv.lock").read_bytes() == (REPO / "uv.lock").read_bytes()
    info = json.loads((root / "runs" / "synced" / OUTPUT).read_text())
    assert "theseus-core" in info["versions"]


def test_resubmit_after_preemption_resumes_the_run(sshds, cli, tmp_path):
    """Attempt 1 runs the job, then exits 3 (what a preempted job does after its checkpoint);
    resubmitting launches attempt 2 into the same run directory."""
    wrapper = tmp_path / "preempted-once"
    wrapper.write_text(
        "#!/bin/bash\n"
        f'if [ ! -f {tmp_path}/preempted ]; then touch {tmp_path}/preempted; {VENV_PYTHON} "$@"; exit 3; fi\n'
        f'exec {VENV_PYTHON} "$@"\n'
    )
    wrapper.chmod(0o755)
    cli.write({"box": ssh_target(sshds[0], tmp_path, python=str(wrapper))})
    root = tmp_path / "remote-root"
    launch = tmp_path / "remote-work" / "launches" / "again"
    cli("submit", JOB, *OVERRIDES, "--name", "again")
    wait_for(lambda: (launch / "exit.0").exists(), 120, what="attempt 1 to end")
    assert "again  box  core/info  preempted" in cli("status", "again").stdout
    cli("submit", JOB, *OVERRIDES, "--name", "again")
    wait_for(lambda: (launch / "exit.0").exists(), 120, what="attempt 2 to end")
    record = json.loads((root / "runs" / "again" / "job.json").read_text())
    assert record["status"] == "finished" and record["attempts"] == 2
    assert "again  box  core/info  finished" in cli("status", "again").stdout


# Holds the training process right after its checkpoint at step HOLD_STEP (once: the
# marker file says it happened), so the test kills it at a known point, not by timing.
HOLD_STEP = 2
HOLD_PLUGIN = """
import os
import time
from theseus.core.hookspecs import hookimpl


@hookimpl
def theseus_on_checkpoint(step, run):
    marker = os.environ["THESEUS_TEST_HOLD_FILE"]
    if step == int(os.environ["THESEUS_TEST_HOLD_STEP"]) and not os.path.exists(marker):
        with open(marker + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(300)  # the test kills it long before
"""


@pytest.mark.slow
def test_killed_training_job_resumes_bit_exactly_when_resubmitted(sshds, cli, tmp_path):
    """A tiny GPT submitted over SSH is SIGKILLed on the host after its first checkpoint;
    the same submit command again resumes it there, and it ends with the losses and the
    parameters of an uninterrupted local run, bit for bit (one process: same programs, same
    data order from (seed, step), state restored exactly)."""
    steps = 6
    args = [
        *TINY,
        f"training.total_steps={steps}",
        "eval.every=0",
        f"checkpoint.every={HOLD_STEP}",
        "logging.peak_flops=1e12",  # no matmul benchmark
    ]
    root = tmp_path / "remote-root"
    whole = subprocess.run(  # the reference; it also tokenizes the corpus into the root
        [VENV_PYTHON, "-m", "theseus.cli.main", "run", TRAIN_JOB, *args,
         "--root", str(root), "--name", "whole"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-3000:]

    site = tmp_path / "site"
    write_plugin(site, "hold-after-checkpoint", "hold", "hold_after_checkpoint", HOLD_PLUGIN)
    marker = tmp_path / "held.pid"
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith(COMPILE_ENV)},
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(site),
        "THESEUS_TEST_HOLD_FILE": str(marker),
        "THESEUS_TEST_HOLD_STEP": str(HOLD_STEP),
    }
    cli.write({"box": ssh_target(sshds[0], tmp_path, env=env)})
    launch = tmp_path / "remote-work" / "launches" / "killed"
    run_dir = root / "runs" / "killed"
    cli("submit", TRAIN_JOB, *args, "--name", "killed")
    try:
        wait_for(marker.exists, 180, what="the run to reach its first checkpoint")
        pid = int(marker.read_text())
        assert "killed" in Path(f"/proc/{pid}/cmdline").read_text()  # the training process
        # asynchronous checkpointing: wait until the save is committed (renamed into place)
        wait_for(lambda: (run_dir / "checkpoints" / str(HOLD_STEP)).is_dir(), 60, what="commit")
    finally:  # killed here, in every case: a failed wait leaves no held process behind
        if marker.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(marker.read_text()), signal.SIGKILL)
    wait_for(lambda: (launch / "exit.0").exists(), 30, what="the bootstrap to end")
    assert (launch / "exit.0").read_text().strip() == str(128 + signal.SIGKILL)
    assert sorted(train_losses(root, "killed")) == list(range(HOLD_STEP))
    assert "killed  box  gpt/train/pretrain  failed" in cli("status", "killed").stdout

    again = cli("submit", TRAIN_JOB, *args, "--name", "killed")
    assert "submitted run killed" in again.stdout
    wait_for(lambda: (launch / "exit.0").exists(), 180, what="attempt 2 to end")
    log = (launch / "log.0").read_text()
    assert (launch / "exit.0").read_text().strip() == "0", log
    assert f"resumed killed from step {HOLD_STEP}" in log, log
    record = json.loads((run_dir / "job.json").read_text())
    assert record["status"] == "finished" and record["attempts"] == 2
    assert (
        "killed  box  gpt/train/pretrain  finished (run: finished, attempt 2)"
        in cli("status", "killed").stdout
    )

    expected, got = train_losses(root, "whole"), train_losses(root, "killed")
    assert sorted(expected) == list(range(steps))
    assert got == expected  # exact float equality, step by step
    a, b = final_params(root, "whole"), final_params(root, "killed")
    assert a.keys() == b.keys() and len(a) > 4
    for key in a:
        assert np.array_equal(a[key], b[key]), key
