"""The one signal rule (``core/stop.py``): inside ``graceful`` a signal asks for a stop; a
second one stops at once; outside, SIGTERM interrupts as Ctrl-C does, and the CLI says so
in one line with exit 128 + the signal.

Before: a job without a stop point of its own (an evaluation, an export, a plugin's job)
ended at SIGTERM with exit 143 and no word, and at Ctrl-C it exited 0 (Typer returned the
interrupt as an exit code, which the CLI dropped) after printing a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from theseus.core import stop

from tests.core.plugin_factory import env_with, write_plugin

SLEEPER = """
import time
from dataclasses import dataclass
from theseus.core.components import JobSpec, option
from theseus.core.hookspecs import hookimpl
from theseus.core.jobs import Job


@dataclass
class Nap:
    seconds: float = option(60.0, "how long", ge=0)


class Sleeps(Job):
    def __call__(self):
        (self.run.path / "started").touch()
        time.sleep(self.config.nap.seconds)


@hookimpl
def theseus_register_jobs(register, registries):
    register(JobSpec("nap/sleep", "nap_plugin:Sleeps", "sleeps", {"nap": Nap}))
"""


def test_graceful_asks_once_then_stops_at_once_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    called = []
    with stop.graceful("the test", lambda: called.append(True)):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 5
        while not stop.requested.is_set() and time.time() < deadline:
            time.sleep(0.01)
        assert stop.requested.is_set() and called == [True]
        assert stop.last_signal() == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # a second signal: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert not stop.requested.is_set() and signal.getsignal(signal.SIGTERM) is before
    assert stop.interrupted_exit_code() == 128 + signal.SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_job_without_stop_points_is_interrupted_in_one_line(tmp_path, sig):
    site = tmp_path / "site"
    write_plugin(site, "nap-dist", "nap", "nap_plugin", SLEEPER)
    root = tmp_path / "root"
    job = subprocess.Popen(
        [sys.executable, "-m", "theseus.cli.main", "run", "nap/sleep", "--name", "nap",
         "--root", str(root)],
        env=env_with(site), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 60
        while not (root / "runs" / "nap" / "started").exists():
            assert job.poll() is None and time.time() < deadline, job.communicate()
            time.sleep(0.05)
        os.kill(job.pid, sig)
        _, err = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    name = signal.Signals(sig).name
    assert job.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == f"stopped by {name} before it finished", err
    assert "Traceback" not in err
    record = json.loads((root / "runs" / "nap" / "job.json").read_text())
    assert record["status"] == "interrupted" and record["error"].startswith(f"stopped by {name}")


def test_serve_stops_cleanly_on_sigterm(tmp_path):
    """A server's normal end: uvicorn stops, then passes the signal on; one line, exit 0."""
    (tmp_path / "runs").mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "theseus.cli.main", "serve", "--root", str(tmp_path),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert " at http://127.0.0.1:" in server.stdout.readline()
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0 and not err, err
    assert out.strip().splitlines()[-1] == "theseus serve: stopped (SIGTERM)"
