"""Dependency groups that coexist: every documented command that installs the chip compilers
(the ``aot`` group) keeps the torch and transformers the README's Hugging Face section and
docs/install.md install with ``uv pip install`` (a plain ``uv sync`` removes what the lock
file does not list). Each command runs with ``--dry-run`` against this environment, which
holds both (CI installs them as docs/install.md says): uv's own plan must remove neither;
then both import here beside the compilers."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.core.test_readme import REPO

PARITY = ("torch", "transformers")


def documented_syncs() -> list[str]:
    """Every ``uv sync ... --group aot`` the README, the docs, CI and the CLI's error say."""
    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / ".ci" / "run"]
    sources.append(REPO / "packages/theseus-core/src/theseus/core/chips/devices.py")
    found = []
    for source in sources:
        text = source.read_text()
        for command in re.findall(r"uv sync[^`\n(#]*", text):
            words = " ".join(command.split())
            if "--group aot" in words:
                found.append(words)
    return found


def test_installing_the_chip_compilers_keeps_the_hugging_face_extras():
    if not all(importlib.util.find_spec(name) for name in PARITY):
        if os.environ.get("THESEUS_REQUIRE_PARITY") == "1":
            pytest.fail("torch and transformers are not installed")
        pytest.skip("torch and transformers (docs/install.md's CPU line) are not installed")
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    commands = documented_syncs()
    assert len(commands) >= 5, commands  # README, install.md, targets.md, the page, CI, ...
    for command in sorted(set(commands)):
        words = shlex.split(command)
        done = subprocess.run(
            [uv, *words[1:], "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (command, done.stderr[-2000:])
        removed = set(re.findall(r"^ - ([A-Za-z0-9_.-]+)==", done.stderr, re.M))
        assert not removed & set(PARITY), (command, done.stderr[-2000:])
    import torch
    import transformers

    assert torch.__version__ and transformers.__version__
    assert importlib.util.find_spec("libtpu") and importlib.util.find_spec("jax_cuda12_plugin")
