"""Helpers for the dispatch tests: the real CLI in a subprocess, waiting on run records."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = str(REPO / ".venv" / "bin" / "python")
THESEUS = [VENV_PYTHON, "-m", "theseus.cli.main"]
# What a remote run takes from the suite's environment to compile as the test's local
# reference does (bit for bit): the compile cache's settings and the XLA flags
COMPILE_ENV = ("JAX_COMPILATION", "JAX_PERSIS", "XLA_FLAGS")


def login(server, tmp: Path, prefix: str) -> dict:
    """The target fields that reach the loopback sshd ``server`` as root, with the remote root
    and workdir at ``tmp/<prefix>-root`` and ``tmp/<prefix>-work``."""
    return {
        "user": "root",
        "key_file": str(server.client_key),
        "known_hosts": str(server.known_hosts),
        "root": str(tmp / f"{prefix}-root"),
        "workdir": str(tmp / f"{prefix}-work"),
        "python": VENV_PYTHON,
    }


def ssh_target(server, tmp: Path, **extra) -> dict:
    """An ssh target on ``server`` (remote folders ``tmp/remote-*``), ``extra`` fields last."""
    hosts = [f"{server.host}:{server.port}"]
    return {
        "type": "ssh",
        "hosts": hosts,
        **login(server, tmp, "remote"),
        "connect_timeout": 5,
        **extra,
    }


class CLI:
    """Runs the real ``theseus`` CLI in a subprocess with this test's config and state."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.config = tmp / "dispatch.yaml"
        self.state = tmp / "state"
        self.env = {
            **os.environ,
            "THESEUS_DISPATCH_STATE": str(self.state),
            "THESEUS_DISPATCH_CONFIG": str(self.config),
        }

    def write(self, targets: dict, priority: list[str] | None = None) -> None:
        data: dict = {"targets": targets}
        if priority:
            data["priority"] = priority
        self.config.write_text(yaml.safe_dump(data))

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run(
            [*THESEUS, *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if os.environ.get("THESEUS_TEST_TIMING"):
            print(f"[{time.monotonic() - started:5.1f} s] theseus {' '.join(args)}")
        if check and done.returncode != 0:
            raise AssertionError(
                f"theseus {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
        return done

    def record(self, name: str) -> dict:
        return json.loads((self.state / f"{name}.json").read_text())


def wait_for(predicate, timeout: float, every: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_status(root: Path, name: str) -> str | None:
    try:
        return json.loads((root / "runs" / name / "job.json").read_text()).get("status")
    except (OSError, json.JSONDecodeError):
        return None
