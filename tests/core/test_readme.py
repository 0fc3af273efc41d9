"""The README's two setup commands are real: CI runs the test one, a test runs the main one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Setup", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.startswith("uv run theseus run ")
    assert tests.startswith("uv run pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert f'README_TEST_COMMAND="{tests}"' in ci
    assert 'eval "$README_TEST_COMMAND"' in ci


@pytest.mark.slow
def test_readme_main_job_runs(tmp_path: Path):
    main_job = readme_commands()[0]
    args = main_job.split()[2:]  # drop "uv run": we are already inside the environment
    env = dict(os.environ, THESEUS_ROOT=str(tmp_path / "runs"))
    result = subprocess.run(
        [str(Path(os.sys.executable).parent / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run " in result.stdout and str(tmp_path / "runs") in result.stdout
