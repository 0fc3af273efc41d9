"""The README's two setup commands are real: CI runs the test one, ``test_readme_tour`` runs
the main one (then the fine-tuning tour, at full size)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.train.conftest import TINY_MODEL

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


def fine_tuning_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Fine-tuning", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.+?)\n```", section, re.S)[0]
    return [shlex.split(line)[2:] for line in block.splitlines()]  # drop "uv run"


MINIATURE = [
    *TINY_MODEL,
    "training.global_batch_size=8",
    "training.total_steps=4",
    "data.max_documents=24",
    "data.num_workers=1",
    "eval.batches=1",
    "eval.every=0",
    "logging.progress=false",
]


@pytest.mark.slow
def test_the_fine_tuning_walk_through_runs_in_miniature(tmp_path: Path):
    """The README's walk-through, each training run shrunk by MINIATURE (its options replace
    the README's own); the export then loads in transformers when the parity group is
    installed. ``test_readme_tour`` runs the same commands at full size."""
    env = dict(os.environ, THESEUS_ROOT=str(tmp_path / "runs"))
    commands = fine_tuning_commands()
    assert [c[:3] for c in commands] == [
        ["theseus", "run", "gpt/train/pretrain"],
        ["theseus", "run", "gpt/train/sft"],
        ["theseus", "run", "gpt/train/dpo"],
        ["theseus", "run", "hf/export"],
    ]
    for command in commands:
        extra = MINIATURE if "/train/" in command[2] else []
        shrunk = {option.split("=", 1)[0] for option in extra}
        kept = [word for word in command[1:] if word.split("=", 1)[0] not in shrunk]
        result = subprocess.run(
            [str(Path(os.sys.executable).parent / command[0]), *kept, *extra],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=900,
        )
        assert result.returncode == 0, (command, result.stderr[-3000:])
    exported = tmp_path / "dpo-hf"
    assert (exported / "config.json").exists() and (exported / "model.safetensors").exists()
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(exported)
    assert model.config.n_layer == 2
