"""The README's two setup commands are real: CI runs the test one, ``test_readme_tour`` runs
the main one (then the fine-tuning walk-through's commands as written)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

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


def test_the_measured_test_files_exist_and_are_handed_out_longest_first():
    """tests/durations.json names test files that exist (a file added since it was measured
    is ranked as unknown), and collection orders files by it (the README tour before
    everything), whatever order they are given in."""
    from tests.durations import every_test_file, measured

    table = measured()
    stale = sorted(set(table) - set(every_test_file()))
    assert not stale, f"regenerate tests/durations.json (tests/durations.py): {stale}"
    given = [
        "tests/core/test_readme.py",
        "tests/sharding/test_parity.py",
        "tests/core/test_readme_tour.py",
    ]
    listed = subprocess.run(
        [os.sys.executable, "-m", "pytest", "--collect-only", "-q", *given],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    files = list(
        dict.fromkeys(line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line)
    )
    assert files == sorted(given, key=lambda path: -table[path]), files
    assert files[0] == "tests/core/test_readme_tour.py", files
