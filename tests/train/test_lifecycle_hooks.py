"""A third-party plugin adds a metric and sees the training lifecycle, touching no core code."""

from __future__ import annotations

import json
import os

from tests.train.conftest import TINY, metrics, run_cli

LIFECYCLE_PLUGIN = """
import json
import os
from theseus.core.hookspecs import hookimpl


def note(event, **fields):
    with open(os.environ["HOOK_LOG"], "a") as out:
        out.write(json.dumps({"event": event, **fields}) + "\\n")


@hookimpl
def theseus_on_train_start(setup, run, step):
    note("start", step=step, run=run.name, total=setup.total_steps)


@hookimpl
def theseus_on_step_end(step, metrics, setup):
    return {"custom/loss_doubled": 2 * metrics["train/loss"]}


@hookimpl
def theseus_on_eval(step, results, run):
    note("eval", step=step, has_val=("val/loss" in results))


@hookimpl
def theseus_on_checkpoint(step, run):
    note("checkpoint", step=step)


@hookimpl
def theseus_on_train_end(summary, run):
    note("end", step=summary["step"])
"""


def test_lifecycle_hooks_add_a_metric_and_see_every_event_in_order(
    shared_root, tmp_path, monkeypatch
):
    from tests.core.plugin_factory import write_plugin

    site = tmp_path / "site"
    write_plugin(site, "lifecycle-probe", "probe", "lifecycle_probe", LIFECYCLE_PLUGIN)
    log = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("PYTHONPATH", f"{site}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("HOOK_LOG", str(log))
    args = ["run", "gpt/train/pretrain", *TINY, "training.total_steps=4", "checkpoint.every=2"]
    done = run_cli(shared_root, *args, "eval.every=2", "--name", "hooked")
    assert done.returncode == 0, done.stderr[-2000:]

    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["event"], e.get("step")) for e in events] == [
        ("start", 0),
        ("eval", 2),
        ("checkpoint", 2),
        ("checkpoint", 4),
        ("eval", 4),
        ("end", 4),
    ]
    assert events[0]["run"] == "hooked" and events[0]["total"] == 4
    assert all(e["has_val"] for e in events if e["event"] == "eval")

    steps = [m for m in metrics(shared_root, "hooked") if "train/loss" in m]
    assert [m["step"] for m in steps] == [0, 1, 2, 3]
    for m in steps:  # the plugin's metric is recorded in the same line as the loss
        assert m["custom/loss_doubled"] == 2 * m["train/loss"]
