"""The type gate can fail: pyproject.toml's ``[tool.mypy]`` (what ``.ci/run`` runs over the
four packages) resolves theseus's own types, so a module that misuses one is an error.

A gate that stopped resolving ``from theseus... import`` (every theseus name ``Any``) would
pass the wrong module below and reveal ``Any``: both assertions here would fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RIGHT = """\
from theseus.core.train.recipe import Recipe
from theseus.core.train.state import TrainState

reveal_type(TrainState)


def layout(recipe: Recipe) -> str:
    return recipe.layout
"""

WRONG = """\
from theseus.core.train.recipe import Recipe


def layout(recipe: Recipe) -> int:
    return recipe.layout
"""


def gate(module: Path) -> subprocess.CompletedProcess[str]:
    """The gate's own configuration (and cache) on ``module`` alone."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")]
    return subprocess.run(
        [*command, str(module)], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_the_type_gate_fails_a_module_that_misuses_a_theseus_type(tmp_path):
    wrong = tmp_path / "wrong_layout.py"
    wrong.write_text(WRONG)
    done = gate(wrong)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{wrong}:5: error: Incompatible return value type" in done.stdout, done.stdout

    right = tmp_path / "right_layout.py"
    right.write_text(RIGHT)
    done = gate(right)
    assert done.returncode == 0, done.stdout + done.stderr
    # the class itself, not Any: the import resolved to theseus's source
    assert "-> theseus.core.train.state.TrainState" in done.stdout, done.stdout
