"""Strict typed configs: every error case names the key and says what was expected."""

from __future__ import annotations

import json

import pytest
from theseus.core.config import ConfigTree
from theseus.core.config_sources import parse_overrides
from theseus.core.errors import (
    ConfigError,
    ConfigKeyError,
    ConfigTypeError,
    MissingConfigError,
    TheseusError,
)
from theseus.core.plugins import registries
from theseus.core.runner import config_for, job_spec

from tests.core.plugin_factory import theseus


def fit_line_tree(overrides=()):
    regs = registries()
    return config_for(job_spec("example/fit-line", regs), regs, overrides)


def test_defaults_come_from_the_schemas_and_types_are_converted():
    tree = fit_line_tree(["task.steps=12", "optimizer.learning_rate=0.5"])
    assert tree.node.task.steps == 12 and isinstance(tree.node.task.steps, int)
    assert tree.node.optimizer.learning_rate == 0.5
    assert tree.node.optimizer.name == "signum" and tree.node.optimizer.momentum == 0.9


def test_unknown_key_names_it_and_suggests_the_closest():
    with pytest.raises(ConfigKeyError) as caught:
        fit_line_tree(["optimizer.lr=0.1"])
    assert "'optimizer.lr'" in str(caught.value)
    assert "did you mean 'optimizer.learning_rate'" in str(caught.value)
    with pytest.raises(ConfigKeyError, match="did you mean 'task.steps'"):
        fit_line_tree(["tsk.steps=3"])
    with pytest.raises(ConfigKeyError, match="'task.stepz'.*did you mean 'task.steps'"):
        fit_line_tree(["task.stepz=3"])


def test_wrong_type_names_key_expected_type_and_value():
    with pytest.raises(ConfigTypeError) as caught:
        fit_line_tree(["task.steps=many"])
    message = str(caught.value)
    assert "'task.steps'" in message and "expects int" in message and "'many'" in message
    with pytest.raises(ConfigTypeError, match="'task.slope' expects float, got 'steep'"):
        fit_line_tree(["task.slope=steep"])


def test_same_key_twice_on_a_command_line_is_an_error():
    with pytest.raises(ConfigError, match="'task.steps' is given twice"):
        parse_overrides(["task.steps=1", "task.seed=2", "task.steps=3"])
    with pytest.raises(ConfigError, match="not of the form key=value"):
        parse_overrides(["task.steps"])


def test_choosing_a_component_swaps_in_its_own_strict_schema():
    tree = fit_line_tree(["optimizer.name=lion", "optimizer.b2=0.98"])
    assert tree.node.optimizer.name == "lion" and tree.node.optimizer.b2 == 0.98
    assert "momentum" not in tree.node.optimizer  # signum's field is gone
    with pytest.raises(ConfigKeyError, match="'optimizer.momentum'"):
        tree.set("optimizer.momentum", 0.5)
    with pytest.raises(ConfigTypeError, match="'optimizer.b2' expects float"):
        tree.set("optimizer.b2", "high")
    with pytest.raises(ConfigError, match="unknown optimizer 'lino'; did you mean 'lion'"):
        fit_line_tree(["optimizer.name=lino"])


def test_component_choice_applies_before_its_fields_whatever_the_order():
    tree = fit_line_tree(["optimizer.b1=0.8", "optimizer.name=adamw"])
    assert tree.node.optimizer.name == "adamw" and tree.node.optimizer.b1 == 0.8


def test_missing_required_values_are_listed_all_at_once(workflow_registries):
    tree = config_for(job_spec("wf/needs", workflow_registries), workflow_registries, [])
    with pytest.raises(MissingConfigError) as caught:
        tree.validate()
    assert "need.corpus" in str(caught.value) and "need.size" in str(caught.value)
    assert "need.label" not in str(caught.value)
    tree.apply(parse_overrides(["need.corpus=c", "need.size=3"]))
    tree.validate()


def test_every_schema_field_has_a_type_and_help_string():
    regs = registries()
    for key, spec in regs.jobs.items():
        tree = ConfigTree(spec, regs)
        for row in tree.describe():
            assert row["type"] not in ("", "any"), (key, row)
            assert row["help"], f"{key}: {row['key']} has no help string"


def test_every_registered_component_choice_builds_a_valid_tree():
    regs = registries()
    for key, spec in regs.jobs.items():
        for group, kind in spec.groups.items():
            if hasattr(kind, "registry") and not kind.locked:
                for name in regs.component(kind.registry).names():
                    tree = config_for(spec, regs, [f"{group}.name={name}"])
                    assert tree.node[group].name == name, (key, group, name)


def test_config_command_prints_types_and_help_as_yaml_and_json():
    result = theseus("config", "example/fit-line", "optimizer.name=adamw", "task.steps=7")
    assert result.returncode == 0, result.stderr
    assert "  steps: 7  # int in [1, inf): optimizer steps" in result.stdout
    assert "  name: adamw  # str:" in result.stdout
    as_json = theseus("config", "example/fit-line", "--json")
    rows = {row["key"]: row for row in json.loads(as_json.stdout)}
    assert rows["task.points"] == {
        "key": "task.points",
        "value": 256,
        "type": "int",
        "help": "number of data points",
        "range": "[1, inf)",
    }


def test_config_errors_are_theseus_errors():
    for cls in (ConfigError, ConfigKeyError, ConfigTypeError, MissingConfigError):
        assert issubclass(cls, TheseusError)
    assert issubclass(ConfigKeyError, AttributeError)
