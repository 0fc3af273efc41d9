"""Fixtures: real sshd (127.0.0.1 and 127.0.0.2) and SLURM daemons, a CLI runner.

The daemons need root and the Debian packages from ``services.sh``; where they are
missing the tests that need them fail with the command to run (they never skip in CI).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helper modules next to this file

import dispatch_servers as servers  # noqa: E402
from dispatch_helpers import CLI  # noqa: E402


def _need(binary: str) -> None:
    if not shutil.which(binary) and not Path(binary).exists():
        pytest.fail(f"{binary} is missing: run `bash tests/dispatch/services.sh` (as root)")


@pytest.fixture(scope="session")
def sshds(tmp_path_factory) -> Iterator[list[servers.SSHD]]:
    _need(servers.SSHD_BIN)
    started = servers.start_sshds(tmp_path_factory.mktemp("sshd"))
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def munge() -> Iterator[None]:
    _need("slurmctld")
    started = servers.start_munge()
    yield
    if started:
        servers.stop_munge()


@pytest.fixture(scope="session")
def slurm1(munge, tmp_path_factory) -> Iterator[servers.Slurm]:
    cluster = servers.Slurm(tmp_path_factory.mktemp("slurm1"), nodes=1).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def slurm2(munge, tmp_path_factory) -> Iterator[servers.Slurm]:
    cluster = servers.Slurm(tmp_path_factory.mktemp("slurm2"), nodes=2).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return CLI(tmp_path)
