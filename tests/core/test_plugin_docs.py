"""docs/plugins.md is a working tutorial, and the contracts it states hold.

The tutorial's files (the code blocks whose first line is ``# file: PATH``) are written into
a package directory and installed the way ``pip install -e .`` would: the ``src`` folder on
PYTHONPATH and a ``.dist-info`` carrying the pyproject's entry points. Then the page's
``theseus`` commands run as written: the plugin lists its dataset, optimizer and model, the
dataset tokenizes, and the model trains with the optimizer (the loss falls).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from theseus.core.components import option
from theseus.core.data.api import find_dataset
from theseus.core.optim.build import build_optimizer
from theseus.core.optim.configs import OptimizerBase

from tests.core.plugin_factory import env_with, plugin_rows, theseus, write_plugin

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "plugins.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"#\s*file:\s*(\S+)")


def code_blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced block of the page, in order."""
    return FENCE.findall(DOC.read_text())


def tutorial_files() -> dict[str, str]:
    """Path -> text of the blocks that name their file on their first line."""
    files = {}
    for _, text in code_blocks():
        first = FILE_LINE.fullmatch(text.splitlines()[0].strip()) if text.strip() else None
        if first:
            files[first.group(1)] = text
    return files


def tutorial_commands() -> list[str]:
    """The shell commands of the bash blocks, continuation lines joined."""
    commands = []
    for language, text in code_blocks():
        if language != "bash":
            continue
        for line in text.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(" ".join(line.split()))
    return commands


#: The page's install lines: uv from the checkout, pip from the package's folder (both run
#: for real by ``test_the_documented_install_lines_work_with_uv_and_with_pip``).
INSTALL_LINES = ["uv pip install -e ../theseus-hello", "pip install -e ."]


def install(package: Path, site: Path) -> dict[str, str]:
    """What the install lines leave behind, made by hand (no environment to build): the
    distribution's metadata with its entry points in ``site``, the source folder importable."""
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
        for group, points in project["entry-points"].items()
    )
    (info / "entry_points.txt").write_text(entry_points)
    env = env_with(site)
    env["PYTHONPATH"] = os.pathsep.join([str(package / "src"), env["PYTHONPATH"]])
    return env


def test_the_tutorial_plugin_installs_lists_tokenizes_and_trains(tmp_path: Path):
    package, root = tmp_path / "theseus-hello", tmp_path / "root"
    files = tutorial_files()
    assert set(files) == {
        "pyproject.toml",
        *(f"src/theseus_hello/{m}.py" for m in ("__init__", "plugin", "dataset", "optim", "model")),
    }
    for relative, text in files.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    env = install(package, tmp_path / "site")
    env["THESEUS_ROOT"] = str(root)

    outputs: dict[str, str] = {}
    commands = tutorial_commands()
    assert commands[:2] == INSTALL_LINES, commands  # what install() stands for
    for command in commands[2:]:
        args = shlex.split(command)
        assert args[0] == "theseus", command
        result = theseus(*args[1:], env=env, cwd=package, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
        outputs.setdefault(args[1], result.stdout)

    hello = plugin_rows(outputs["plugins"])["hello"]
    for registered in ("theseus-hello", "model: shiftmlp", "dataset: times-tables", "nsgd"):
        assert registered in hello, hello
    assert "data/tokenize/times-tables" in outputs["jobs"]
    assert "shiftmlp/train/pretrain" in outputs["jobs"]

    metadata = json.loads((find_dataset(root, "times-tables") / "metadata.json").read_text())
    assert metadata["dataset"] == "times-tables" and metadata["documents"] == 500
    run = root / "runs" / "hello"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) >= 4
    assert losses[0] > 5.0 and losses[-1] < 1.5, losses  # what the page promises
    record = json.loads((run / "job.json").read_text())
    assert record["key"] == "shiftmlp/train/pretrain" and record["status"] == "finished"
    assert "optimizer:\n  name: nsgd" in (run / "config.yaml").read_text()


# ---------------------------------------------------------------------- the stated contracts

PLAIN_CONFIG = """
from dataclasses import dataclass
from theseus.core.components import Component, option
from theseus.core.hookspecs import hookimpl

@dataclass
class PlainConfig:
    learning_rate: float = option(0.1, "step size")

@hookimpl
def theseus_register_{kind}s(register):
    register(Component("plain", PlainConfig, "plain_plugin:build"))
"""


@pytest.mark.parametrize(
    "kind,base",
    [
        (
            "optimizer",
            "OptimizerBase (subclass it: it brings learning_rate, weight_decay, grad_clip)",
        ),
        ("schedule", "ScheduleBase (subclass it: it brings warmup_steps, total_steps)"),
    ],
)
def test_a_config_without_the_base_class_is_refused_when_the_plugin_loads(tmp_path, kind, base):
    write_plugin(tmp_path, "plain-dist", "plain", "plain_plugin", PLAIN_CONFIG.format(kind=kind))
    result = theseus("jobs", env=env_with(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: plugin 'plain' (package plain-dist) registers {kind} 'plain' with config class "
        f"PlainConfig, which does not subclass theseus.core.optim.configs.{base}"
    ]


def plain_sgd(config, learning_rate):
    """A plugin's optimizer that reads neither ``grad_clip`` nor ``weight_decay``."""
    return optax.sgd(learning_rate)


class _Loaded:
    def load(self):
        return plain_sgd


class _Registries:
    optimizers = {"plain-sgd": _Loaded()}


def test_core_clips_and_decays_around_any_plugin_optimizer():
    """A plugin's plain SGD (it reads neither key) still gets ``grad_clip`` (the gradients
    clipped first) and ``weight_decay`` (``-lr * wd * p`` on matrices, not on a bias)."""

    from dataclasses import dataclass

    @dataclass
    class PlainSGD(OptimizerBase):
        learning_rate: float = option(0.1, "step size")

    regs = _Registries()
    config = PlainSGD(weight_decay=0.5, grad_clip=1.0)
    config.name = "plain-sgd"
    lr = 0.1
    optimizer = build_optimizer(regs, config, optax.constant_schedule(lr))
    params = {"w": jnp.ones((4, 4)), "bias": jnp.ones((4,))}
    grads = jax.tree.map(lambda p: 10.0 * jnp.ones_like(p), params)  # global norm 44.7
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    norm = float(optax.tree.norm(grads))
    np.testing.assert_allclose(updates["bias"], -lr * 10.0 / norm, rtol=1e-6)
    np.testing.assert_allclose(updates["w"], -lr * 10.0 / norm - lr * 0.5, rtol=1e-6)

    # unwrapped: the same optimizer with both keys off is the plugin's transformation alone
    config = PlainSGD(weight_decay=0.0, grad_clip=0.0)
    config.name = "plain-sgd"
    optimizer = build_optimizer(regs, config, optax.constant_schedule(lr))
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    np.testing.assert_allclose(updates["w"], -lr * 10.0, rtol=1e-6)
