"""A run started from ``init.checkpoint`` shows that run as its parent (issue 35).

Before: ``theseus serve``'s runs table and ``theseus runs`` left the parent column empty
for such a run: only ``--branch`` filled it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.inspect.serve_helpers import get_json, served
from tests.train.conftest import TINY, run_cli


@pytest.fixture
def started(copied_root: Path) -> Path:
    """``copied_root`` plus ``child``: one step from alpha's step-2 weights."""
    args = ["run", "gpt/train/pretrain", *TINY, "training.total_steps=1", "eval.every=0"]
    done = run_cli(copied_root, *args, "init.checkpoint=alpha@2", "--name", "child")
    assert done.returncode == 0, done.stderr[-3000:]
    return copied_root


def test_serve_and_runs_show_the_init_checkpoint_as_the_parent(started):
    listing = run_cli(started, "runs", str(started))
    assert listing.returncode == 0, listing.stderr
    child = next(line for line in listing.stdout.splitlines() if line.split()[:1] == ["child"])
    assert "alpha@2" in child
    with served(started) as url:
        rows = {row["name"]: row for row in get_json(url, "/api/runs")["runs"]}
    assert rows["child"]["parent"] == "alpha@2"
    assert rows["beta"]["parent"] == "alpha@2" and rows["alpha"]["parent"] is None
