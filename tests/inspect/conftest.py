"""A root with two real tiny runs, shared by the inspect and serve tests (read-only: a test
that changes files works on a copy, see ``copied_root``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.train.conftest import TINY, run_cli


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory) -> Path:
    """``alpha`` (4 steps, checkpoints at 2 and 4, val-ppl evaluations), ``beta``, branched
    from ``alpha@2`` with a 5x learning rate, and ``judge``, an evaluation of ``alpha@4``."""
    root = tmp_path_factory.mktemp("runs")
    base = [
        "run",
        "gpt/train/pretrain",
        *TINY,
        "training.total_steps=4",
        "checkpoint.every=2",
        "eval.every=2",
    ]
    alpha = run_cli(root, *base, "eval.tasks=[val-ppl]", "--name", "alpha")
    assert alpha.returncode == 0, alpha.stderr[-2000:]
    beta = run_cli(
        root, *base, "optimizer.learning_rate=3e-3", "--name", "beta", "--branch", "alpha@2"
    )
    assert beta.returncode == 0, beta.stderr[-2000:]
    judge = run_cli(
        root, "run", "gpt/evaluate", "evaluate.checkpoint=alpha@4", "evaluate.tasks=[val-ppl]",
        "--name", "judge",
    )  # fmt: skip
    assert judge.returncode == 0, judge.stderr[-2000:]
    return root


@pytest.fixture
def copied_root(two_runs: Path, tmp_path: Path) -> Path:
    """A copy of ``two_runs`` a test may change."""
    copy = tmp_path / "root"
    shutil.copytree(two_runs, copy, symlinks=True)
    return copy
