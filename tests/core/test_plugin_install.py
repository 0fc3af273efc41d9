"""docs/plugins.md's install lines, run as written: uv from the checkout, pip from the plugin.

Before (issue 35): the page said ``pip install -e .`` from the plugin's folder. In the uv
workflow there is no pip in the environment, and ``uv pip install -e .`` from the plugin's
folder finds no environment ("No virtual environment found"): only ``uv pip install -e
PATH`` run from the checkout installs into its ``.venv``.

A throwaway checkout stands in for theseus's: a ``.venv`` (with pip, as ``uv venv --seed``
makes it) holding theseus-core and theseus-data as the checkout's own editable installs, the
tutorial's package beside it. Both lines run offline: uv from its cache, pip with no index
and no build isolation (hatchling is installed beside theseus).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from tests.core.plugin_factory import plugin_rows
from tests.core.test_packaging import REPO, uv_pip_install
from tests.core.test_plugin_docs import INSTALL_LINES, tutorial_commands, tutorial_files


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def listed(venv: Path, env: dict[str, str]) -> dict[str, str]:
    done = run([str(venv / "bin" / "theseus"), "plugins"], venv.parent, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return plugin_rows(done.stdout)


def test_the_documented_install_lines_work_with_uv_and_with_pip(tmp_path: Path):
    uv_line, pip_line = (shlex.split(line) for line in tutorial_commands()[:2])
    assert [shlex.join(uv_line), shlex.join(pip_line)] == INSTALL_LINES
    checkout, package = tmp_path / "theseus", tmp_path / "theseus-hello"
    for relative, text in tutorial_files().items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    checkout.mkdir()
    shutil.copy(REPO / "uv.toml", checkout / "uv.toml")  # the system Python, as ours
    venv = checkout / ".venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_", "PIP_"))}
    env.pop("CONDA_PREFIX", None)
    made = run(["uv", "venv", str(venv), "--python", "python3.11", "--seed"], checkout, env)
    assert made.returncode == 0, made.stderr
    core, data = (str(REPO / "packages" / name) for name in ("theseus-core", "theseus-data"))
    uv_pip_install(str(venv / "bin" / "python"), "-e", core, "-e", data, "hatchling", "editables")
    assert "hello" not in listed(venv, env)

    done = run(uv_line, checkout, {**env, "UV_OFFLINE": "1"})  # from the cache when it can
    if done.returncode != 0:
        done = run(uv_line, checkout, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "theseus-hello" in listed(venv, env)["hello"]

    removed = run(["uv", "pip", "uninstall", "theseus-hello"], checkout, env)
    assert removed.returncode == 0 and "hello" not in listed(venv, env), removed.stderr
    active = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{env['PATH']}"}
    offline = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # "0": isolation off
    done = run(pip_line, package, {**active, **offline})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "theseus-hello" in listed(venv, env)["hello"]
