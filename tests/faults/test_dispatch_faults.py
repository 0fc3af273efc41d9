"""Dispatch faults against real daemons: each is one line on stderr and exit 2.

Before: submitting to a host whose sshd offers no SFTP subsystem (``Subsystem sftp`` left
out of sshd_config, as on some hardened hosts) died in paramiko with a traceback (exit 1).
"""

from __future__ import annotations

import shutil

import pytest

from tests.dispatch.dispatch_helpers import CLI, ssh_target
from tests.dispatch.dispatch_servers import SSHD_BIN, start_sshds


def test_a_host_without_sftp_is_refused_in_one_line(tmp_path):
    if not shutil.which(SSHD_BIN):
        pytest.fail(f"{SSHD_BIN} is missing: run `bash tests/dispatch/services.sh` (as root)")
    (server,) = start_sshds(tmp_path / "sshd", hosts=("127.0.0.1",), sftp=False)
    cli = CLI(tmp_path)
    cli.write({"nosftp": ssh_target(server, tmp_path)})
    try:
        done = cli("submit", "core/info", "--name", "upload", check=False)
    finally:
        server.stop()
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"error: root@{server.host}:{server.port}: the SSH server offers no SFTP, which "
        "theseus needs to upload the bundle and launch files; enable it in the host's "
        "sshd_config (e.g. `Subsystem sftp internal-sftp`) or use another host"
    )
    # nothing half-made is left on the host, and nothing is recorded locally
    work = tmp_path / "remote-work"
    assert not list(work.rglob("*.partial.*")) and not (work / "launches").exists()
    assert not cli.state.exists()


# ---------------------------------------------------------------- secrets (issue 24)
# Before: `logging.wandb.project=$WANDB_API_KEY` (expanded by the shell) was written into the
# dry-run plan, bootstrap.sh (mode 0755), submission.json, config.yaml and the local state;
# the bundle check caught a *file* holding the secret, not this path.
UNREACHABLE_SSH = {
    "type": "ssh",
    "hosts": ["127.0.0.1:1"],  # nothing listens: any attempt to connect would fail
    "root": "/nowhere/root",
    "python": "/usr/bin/python3",
    "connect_timeout": 1,
}


@pytest.mark.parametrize(
    ("variable", "listed", "value", "override"),
    [
        ("WANDB_API_KEY", True, "sk-" + "7" * 24, "logging.wandb.project={}"),
        ("HF_TOKEN", False, "sk-" + "7" * 24, "logging.wandb.project={}"),
        # named like a credential too: a personal access token, a password
        ("GITHUB_PAT", False, "ghp_" + "x7" * 18, "logging.wandb.project={}"),
        ("DB_PWD", False, "hunter2-hunter2", "data.dataset_options={{dsn: {}}}"),
    ],
)  # listed in secrets:, or named like one
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_secret_in_an_override_never_leaves(tmp_path, variable, listed, value, override, dry_run):
    cli = CLI(tmp_path)
    cli.write({"box": {**UNREACHABLE_SSH, "secrets": [variable] if listed else []}})
    cli.env[variable] = value
    key = override.split("=", 1)[0]
    args = ["submit", "gpt/train/pretrain", override.format(value), "--to", "box"]
    done = cli(*args, "--name", "leaky", *(["--dry-run"] if dry_run else []), check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: override {key}=... holds the value of the secret ${variable}: "
        "it would be written in the clear (dispatch plan, bootstrap.sh, submission.json, "
        f"config.yaml, local state); list {variable} under the target's 'secrets:' and read it "
        "from the environment on the target instead"
    ]
    assert value not in done.stdout + done.stderr
    assert not cli.state.exists()


@pytest.mark.parametrize(
    ("override", "shown"),
    [
        ("logging.wandb.project=ghp_" + "Q" * 36, "logging.wandb.project=<redacted>"),
        ("data.dataset_options={pwd: pa55word}", "pwd: <redacted>"),
        ("logging.wandb.project=https://me:pa55word@wandb.example", "https://<redacted>@"),
    ],
)
def test_a_credential_by_name_or_shape_never_leaves(tmp_path, override, shown):
    """No variable holds it, but the one redaction rule would hide it: it is refused too."""
    cli = CLI(tmp_path)
    cli.write({"box": UNREACHABLE_SSH})
    done = cli("submit", "gpt/train/pretrain", override, "--to", "box", "--dry-run", check=False)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "holds a credential (" in line and shown in line, line
    assert "pa55word" not in line and "Q" * 36 not in line and not done.stdout
    assert not cli.state.exists()


# ------------------------------------------------- values in generated scripts (issue 24)
@pytest.mark.parametrize(
    ("target", "override", "message"),
    [
        (
            {"workdir": "/w\ntouch /tmp/theseus-pwned"},
            None,
            "target 'box': key 'workdir' holds a control character ('\\n')",
        ),
        (
            {"env": {"NOTE": "a\rb"}},
            None,
            "target 'box': key 'env.NOTE' holds a control character ('\\r')",
        ),
        ({}, 'eval.options={a: "x\ny"}', "override 'eval.options' holds a control character"),
    ],
)
def test_a_value_that_would_end_a_script_line_is_refused(tmp_path, target, override, message):
    cli = CLI(tmp_path)
    cli.write({"box": {**UNREACHABLE_SSH, **target}})
    args = ["submit", "gpt/train/pretrain", *([override] if override else []), "--to", "box"]
    done = cli(*args, "--name", "odd", "--dry-run", check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not done.stdout and not cli.state.exists()


def test_an_sbatch_line_takes_only_plain_words(tmp_path):
    from theseus.dispatch import config
    from theseus.dispatch.bootstrap import Submission
    from theseus.dispatch.script_values import ScriptValueError
    from theseus.dispatch.targets.slurm import SlurmBackend

    target = config.build_target(
        "hpc",
        {"type": "slurm", "root": "/r", "workdir": "/scratch/my work"},
        config.BUILTIN_SCHEMAS,
        "f",
    )
    backend = SlurmBackend("hpc", target)
    sub = Submission(job="core/info", overrides=[], name="r", target="hpc")
    with pytest.raises(ScriptValueError) as caught:
        backend.batch_script(sub, "/scratch/my work/launches/r")
    assert str(caught.value).startswith(
        "target 'hpc': the launch folder (workdir/launches/<run>) '/scratch/my work/launches/r/"
        "slurm.out' cannot be written on an #SBATCH line"
    )
