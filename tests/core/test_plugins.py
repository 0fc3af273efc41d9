"""Plugin discovery through the entry-point group, conflicts, broken plugins, switches."""

from __future__ import annotations

from pathlib import Path

from tests.core.plugin_factory import env_with, plugin_rows, theseus, write_plugin

DUPLICATE_OPTIMIZER = """
from dataclasses import dataclass
from theseus.core.components import Component
from theseus.core.hookspecs import hookimpl

@dataclass
class Cfg:
    learning_rate: float = 0.1

@hookimpl
def theseus_register_optimizers(register):
    register(Component("adamw", Cfg, "nowhere:adamw"))
"""

BROKEN = """
raise RuntimeError("first line\\nthe plugin's last line")
"""

SMALL_JOB = """
from dataclasses import dataclass
from theseus.core.components import JobSpec
from theseus.core.hookspecs import hookimpl

@hookimpl
def theseus_register_jobs(register, registries):
    register(JobSpec("tiny/job", "nowhere:Job", "a tiny job"))
"""


def test_builtin_and_third_party_plugins_are_listed_with_what_they_register():
    result = theseus("plugins")
    assert result.returncode == 0, result.stderr
    lines = plugin_rows(result.stdout)
    assert (
        "theseus-core" in lines["core"]
        and "adamw" in lines["core"]
        and "core/info" in lines["core"]
    )
    assert "theseus-example-plugin" in lines["example"] and "0.3.1" in lines["example"]
    assert "signum" in lines["example"] and "example/fit-line" in lines["example"]


def test_the_listing_fits_the_terminal_width_and_loses_no_name():
    """Before (issue 35): one line per plugin, 1,246 characters for core's, whatever the
    terminal's width."""
    wide = plugin_rows(theseus("plugins", env=env_with(COLUMNS="1000")).stdout)
    for columns in (80, 120):
        result = theseus("plugins", env=env_with(COLUMNS=str(columns)))
        assert result.returncode == 0, result.stderr
        assert max(len(line) for line in result.stdout.splitlines()) <= columns
        rows = plugin_rows(result.stdout)
        assert rows.keys() == wide.keys()
        for name, row in rows.items():  # every kind and name is still there
            assert row.split() == wide[name].split(), name
        assert "core/info" in rows["core"] and "example/fit-line" in rows["example"]


def test_two_plugins_registering_one_name_is_an_error_naming_both_packages(tmp_path: Path):
    write_plugin(tmp_path, "dupe-optim", "dupe", "dupe_plugin", DUPLICATE_OPTIMIZER)
    result = theseus("jobs", env=env_with(tmp_path))
    assert result.returncode == 2
    assert "optimizer 'adamw' is registered twice" in result.stderr
    assert "theseus-core" in result.stderr and "dupe-optim" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_broken_plugin_is_reported_once_and_the_rest_still_load(tmp_path: Path):
    write_plugin(tmp_path, "broken-dist", "broken", "broken_plugin", BROKEN)
    write_plugin(tmp_path / "b", "small-dist", "small", "small_plugin", SMALL_JOB)
    env = env_with(tmp_path)
    env["PYTHONPATH"] = f"{tmp_path / 'b'}:{env['PYTHONPATH']}"
    result = theseus("jobs", env=env)
    assert result.returncode == 0, result.stderr
    assert "tiny/job" in result.stdout and "core/info" in result.stdout
    reports = [line for line in result.stderr.splitlines() if "broken" in line]
    assert len(reports) == 1, result.stderr
    assert "'broken'" in reports[0] and "broken-dist" in reports[0]
    assert "the plugin's last line" in reports[0] and "first line" not in reports[0]


def test_autoload_can_be_disabled_and_an_allow_list_restricts_plugins():
    disabled = theseus("jobs", env=env_with(THESEUS_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert disabled.returncode == 0
    assert "core/info" not in disabled.stdout and "example/fit-line" not in disabled.stdout

    only_core = theseus("plugins", env=env_with(THESEUS_PLUGINS="core"))
    assert list(plugin_rows(only_core.stdout)) == ["core"]

    allowed = theseus(
        "jobs", env=env_with(THESEUS_DISABLE_PLUGIN_AUTOLOAD="1", THESEUS_PLUGINS="core,example")
    )
    assert "core/info" in allowed.stdout and "example/fit-line" in allowed.stdout


def test_registries_know_the_owner_of_each_name():
    from theseus.core.plugins import load_registries

    registries = load_registries()
    assert registries.optimizers.owner("adamw").distribution == "theseus-core"
    assert registries.optimizers.owner("signum").distribution == "theseus-example-plugin"
    assert registries.jobs.owner("example/fit-line").name == "example"
