"""Dispatch faults against real daemons: each is one line on stderr and exit 2.

Before: submitting to a host whose sshd offers no SFTP subsystem (``Subsystem sftp`` left
out of sshd_config, as on some hardened hosts) died in paramiko with a traceback (exit 1).
"""

from __future__ import annotations

import shutil

import pytest

from tests.dispatch.dispatch_helpers import CLI, VENV_PYTHON
from tests.dispatch.dispatch_servers import SSHD_BIN, start_sshds


def test_a_host_without_sftp_is_refused_in_one_line(tmp_path):
    if not shutil.which(SSHD_BIN):
        pytest.fail(f"{SSHD_BIN} is missing: run `bash tests/dispatch/services.sh` (as root)")
    (server,) = start_sshds(tmp_path / "sshd", hosts=("127.0.0.1",), sftp=False)
    cli = CLI(tmp_path)
    cli.write(
        {
            "nosftp": {
                "type": "ssh",
                "hosts": [f"{server.host}:{server.port}"],
                "user": "root",
                "key_file": str(server.client_key),
                "known_hosts": str(server.known_hosts),
                "root": str(tmp_path / "remote-root"),
                "workdir": str(tmp_path / "remote-work"),
                "python": VENV_PYTHON,
                "connect_timeout": 5,
            }
        }
    )
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
