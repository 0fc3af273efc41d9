"""Every example the CLI's ``--help`` shows runs as written: the examples in each command's
epilog (``theseus run --help`` ends with them), in order, in one empty folder, with the
default root (``./runs``). The resume example once asked for a longer run that the default
``training.schedule_on_resume=refuse`` refuses."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import typer
from typer.main import get_command

from tests.core.plugin_factory import theseus


def epilogs() -> dict[str, str]:
    """Command path -> its epilog, for core's commands and every plugin's Typer group."""
    from theseus.cli.main import app
    from theseus.core.plugins import registries

    plugins = typer.Typer()  # the plugins' command groups, added as the CLI adds them
    for name, command in registries().commands.items():
        if isinstance(command, typer.Typer):
            plugins.add_typer(command, name=name)
    found = {}
    pending = [("", get_command(app)), ("", get_command(plugins))]
    while pending:
        path, command = pending.pop()
        if command.epilog:
            found[path] = command.epilog
        for name, sub in getattr(command, "commands", {}).items():
            pending.append((f"{path} {name}".strip(), sub))
    return found


def examples(text: str) -> list[list[str]]:
    """The ``theseus ...`` lines of an epilog, continuation lines joined, as argv."""
    joined = text.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if line.startswith("theseus ")]


def test_every_help_example_runs_as_written(tmp_path: Path):
    found = {path: examples(text) for path, text in epilogs().items()}
    ran = 0
    env = {k: v for k, v in os.environ.items() if k != "THESEUS_ROOT"}
    for path, commands in sorted(found.items()):
        for args in commands:
            assert args[0] == "theseus", args
            done = subprocess.run(
                [sys.executable, "-m", "theseus.cli.main", *args[1:]],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, (path, args, done.stderr[-2000:])
            ran += 1
    assert len(found["run"]) >= 5 and ran == sum(map(len, found.values())), found
    # the help itself shows them: what is run here is what a user reads
    shown = theseus("run", "--help", env={**os.environ, "COLUMNS": "200"}).stdout
    assert "training.schedule_on_resume=stretch  # the same run: resumed, longer" in shown
    assert (tmp_path / "runs" / "runs" / "low-lr").is_dir()
