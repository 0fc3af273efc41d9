"""Helpers of the sharding tests: scenarios run in subprocesses with simulated devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_module(
    module: str, *args: str, devices: int = 8, timeout: int = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m module args`` with ``devices`` simulated CPU devices."""
    environment = {**os.environ, **(env or {})}
    environment["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    environment["JAX_PLATFORMS"] = "cpu"
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO), environment.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=environment,
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
