"""Write real installed-looking plugins (a module plus a .dist-info) into a directory.

`importlib.metadata` discovers a ``*.dist-info`` folder on any ``sys.path`` entry, so a test
can add a third-party plugin through the same entry-point path as a pip-installed one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def write_plugin(
    site: Path, dist: str, entry_name: str, module: str, source: str, version: str = "1.0"
) -> None:
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[theseus]\n{entry_name} = {module}\n")


def env_with(site: Path | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def theseus(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 300
):
    """Run the real CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "theseus.cli.main", *args],
        capture_output=True,
        text=True,
        env=env or env_with(),
        cwd=cwd,
        timeout=timeout,
    )


def plugin_rows(listing: str) -> dict[str, str]:
    """``theseus plugins``'s output as plugin name -> its row, the lines a long row wraps
    onto (indented under its columns) joined back with spaces."""
    rows: dict[str, str] = {}
    name = None
    for line in listing.splitlines()[1:]:
        if line[:1].strip():
            name = line.split()[0]
            rows[name] = line.rstrip()
        elif name is not None and line.strip():
            rows[name] += " " + line.strip()
    return rows
