"""YAML that expands without bound is refused in one line wherever theseus reads YAML.

Before (issue 24): a config file with a billion-laughs anchor hung ``theseus run`` with no
output (killed after 240 s); the same document as a run's saved config.yaml wedged
``theseus serve`` (see test_serve_faults); a document nested 10,000 deep ended in a
RecursionError traceback.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from theseus.core.errors import ConfigError

from tests.train.conftest import run_cli, theseus_cmd


def cli(*args: str) -> subprocess.CompletedProcess:
    """A command without --root (``theseus config`` has none)."""
    return subprocess.run(theseus_cmd(*args), capture_output=True, text=True, timeout=600)


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """``a`` holds ``width`` strings, each next key ``width`` aliases of the one before:
    ``width ** levels`` values once expanded, a few hundred bytes as text."""
    lines = ["a: &a [" + ", ".join(['"lol"'] * width) + "]"]
    previous = "a"
    for index in range(1, levels):
        name = f"l{index}"
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * width) + "]")
        previous = name
    return "\n".join(lines) + "\n"


BOMB = billion_laughs()
REFUSED = (
    "the document expands to more than 100,000 values once its aliases are followed "
    "(an alias bomb?)"
)
QUICK = 60.0  # seconds: a refusal reads a few hundred bytes (before: killed after 240 s)


def one_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def test_a_config_file_bomb_and_a_deep_one_are_refused_in_one_line(tmp_path):
    bomb, deep = tmp_path / "bomb.yaml", tmp_path / "deep.yaml"
    bomb.write_text(BOMB)
    deep.write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n")
    started = time.monotonic()
    done = run_cli(tmp_path / "root", "run", "gpt/train/pretrain", "-c", str(bomb))
    assert time.monotonic() - started < QUICK
    assert one_line(done) == f"error: config file {bomb} is refused: {REFUSED}"
    done = cli("config", "gpt/train/pretrain", "-c", str(deep))
    assert one_line(done).startswith(f"error: config file {deep} is refused: collections are")
    assert not (tmp_path / "root").exists()


def test_an_override_bomb_is_refused_in_one_line(tmp_path):
    flow = "{a: &a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(
        f"l{i}: &l{i} [" + ", ".join([f"*{'a' if i == 1 else f'l{i - 1}'}"] * 10) + "]"
        for i in range(1, 8)
    )
    done = cli("config", "gpt/train/pretrain", f"eval.options={flow}}}")
    assert one_line(done) == f"error: override eval.options=...: {REFUSED}"


def test_a_saved_config_bomb_is_refused_on_resume_and_shown_by_theseus_show(tmp_path):
    run = tmp_path / "runs" / "bombed"
    run.mkdir(parents=True)
    record = {"key": "gpt/train/pretrain", "name": "bombed", "status": "finished"}
    (run / "job.json").write_text(json.dumps(record))
    (run / "config.yaml").write_text(BOMB)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    done = run_cli(tmp_path, "run", "gpt/train/pretrain", "--name", "bombed")
    assert one_line(done) == (
        f"error: {run / 'config.yaml'} is not readable YAML ({REFUSED}); restore it, or rerun "
        "with --fresh to start the run over"
    )
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    shown = run_cli(tmp_path, "show", "bombed")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"{run / 'config.yaml'} is not valid YAML: {REFUSED}" in shown.stderr


def test_a_dispatch_config_bomb_is_one_config_error(tmp_path: Path):
    from theseus.dispatch import config

    path = tmp_path / "dispatch.yaml"
    path.write_text(BOMB)
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert str(caught.value) == f"{path}: not valid YAML: {REFUSED}"
