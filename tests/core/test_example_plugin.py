"""The example third-party plugin: its dataset, optimizer, schedule and job are first-class."""

from __future__ import annotations

import json

from theseus.core.data.api import find_dataset
from theseus.core.plugins import registries
from theseus.quick import quick

from tests.core.plugin_factory import theseus


def test_example_plugin_registers_through_the_entry_point():
    regs = registries()
    owner = {
        kind: regs.component(kind).owner(name).distribution
        for kind, name in [
            ("datasets", "counting-rhymes"),
            ("optimizers", "signum"),
            ("schedules", "step-decay"),
        ]
    }
    assert set(owner.values()) == {"theseus-example-plugin"}
    assert regs.jobs.owner("example/fit-line").distribution == "theseus-example-plugin"
    # other plugins' generated jobs cover the third-party dataset too
    assert "data/tokenize/counting-rhymes" in regs.jobs


def test_third_party_dataset_tokenizes_and_trains_through_quick(root):
    with quick(root) as q:
        q.build("data/tokenize/counting-rhymes", "rhymes")
        q.config.data.documents = 200
        q.config.tokenizer.name = "byte"
        q.create()()
    metadata = json.loads((find_dataset(root, "counting-rhymes") / "metadata.json").read_text())
    assert metadata["documents"] == 200 and metadata["dataset"] == "counting-rhymes"


def test_plugin_optimizer_drives_a_core_job_from_the_cli(root):
    result = theseus(
        "run",
        "example/fit-line",
        "optimizer.name=signum",
        "schedule.name=cosine",
        "task.steps=200",
        "optimizer.learning_rate=0.05",
        "--root",
        str(root),
        "--name",
        "signum-cosine",
    )
    assert result.returncode == 0, result.stderr
    fit = json.loads((root / "runs" / "signum-cosine" / "result.json").read_text())
    assert fit["optimizer"] == "signum" and fit["final_loss"] < fit["first_loss"] / 3


def test_the_fit_line_job_reaches_its_line_with_its_own_defaults(root):
    """Before (issue 35): Signum at its default step size (0.01, halved every 100 steps)
    moved the slope 1.75 of the way to 3.0 in the default 300 steps."""
    from theseus.core.runner import run

    fit = run("example/fit-line", [], root=root, name="defaults")
    assert fit["optimizer"] == "signum" and abs(fit["slope"] - 3.0) <= 0.05, fit
    assert abs(fit["intercept"] + 1.0) <= 0.05, fit
