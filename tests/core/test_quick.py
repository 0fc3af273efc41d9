"""The quick API: build, strict typed q.config, create, call."""

from __future__ import annotations

import json

import pytest
from theseus.core.errors import ConfigKeyError, ConfigTypeError, MissingConfigError, TheseusError
from theseus.quick import quick


def test_quick_builds_configures_creates_and_runs_a_plugin_job(root):
    with quick(root) as q:
        q.build("example/fit-line", "my-fit")
        q.config.task.steps = 40
        q.config.optimizer.name = "adamw"  # swaps in AdamW's schema at once
        q.config.optimizer.learning_rate = 0.1
        q.config.optimizer.b1 = 0.8
        job = q.create()
        result = job()
    assert result["optimizer"] == "adamw"
    assert result["final_loss"] < result["first_loss"] / 4
    saved = json.loads((root / "runs" / "my-fit" / "result.json").read_text())
    assert saved == result
    config_text = (root / "runs" / "my-fit" / "config.yaml").read_text()
    assert "steps: 40" in config_text and "b1: 0.8" in config_text


def test_config_before_build_is_a_clear_error(root):
    with quick(root) as q:
        with pytest.raises(TheseusError, match=r"q.config is not available before q.build"):
            _ = q.config
        with pytest.raises(TheseusError, match=r"q.create\(\) needs q.build"):
            q.create()


def test_typos_and_wrong_types_raise_on_assignment(root):
    with quick(root) as q:
        q.build("example/fit-line", "typos")
        with pytest.raises(ConfigKeyError, match="'task.stepz'.*did you mean 'task.steps'"):
            q.config.task.stepz = 3
        with pytest.raises(ConfigKeyError, match="'tsk'"):
            _ = q.config.tsk
        with pytest.raises(ConfigTypeError, match="'task.steps' expects int, got 'ten'"):
            q.config.task.steps = "ten"
        assert q.config.task.steps == 300  # unchanged by the failed assignments
        # the README's "typed: a string here is an error", for a number's text too
        q.config.optimizer.name = "adamw"
        for text in ("0.1", "fast"):
            with pytest.raises(ConfigTypeError, match=f"expects float, got '{text}' \\(str\\)"):
                q.config.optimizer.learning_rate = text
        with pytest.raises(ConfigTypeError, match="'task.steps' expects int, got '10'"):
            q.config.task.steps = "10"
        assert q.config.optimizer.learning_rate == 6e-4 and q.config.task.steps == 300
        assert hasattr(q.config.task, "steps") and not hasattr(q.config.task, "stepz")
        assert q.config.node.task.points == 256  # the OmegaConf tree underneath


def test_create_validates_the_whole_config(root, workflow_registries):
    with quick(root) as q:
        q.build("wf/needs", "needs")
        with pytest.raises(MissingConfigError, match="need.corpus, need.size"):
            q.create()
        q.config.need.corpus = "c"
        q.config.need.size = 2
        q.create()()
    assert (root / "runs" / "needs" / "produced.json").exists()
