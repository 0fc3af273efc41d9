"""Each package builds its own wheel; core alone works; adding models adds its jobs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ["theseus-core", "theseus-models", "theseus-data", "theseus-dispatch"]


def sh(*args: str, cwd: Path = REPO, timeout: int = 600) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_workspace_layout_is_a_pep420_namespace():
    import theseus

    for package in PACKAGES:
        src = REPO / "packages" / package / "src" / "theseus"
        assert (REPO / "packages" / package / "pyproject.toml").exists()
        assert not (src / "__init__.py").exists(), f"{src} must stay a namespace portion"
    portions = {Path(p).parts[-3] for p in theseus.__path__ if "packages" in Path(p).parts}
    assert set(PACKAGES) <= portions
    import theseus.core
    import theseus.data
    import theseus.dispatch
    import theseus.models
    import theseus.quick  # noqa: F401


@pytest.mark.slow
def test_core_wheel_alone_then_models_wheel(tmp_path: Path):
    dist = tmp_path / "dist"
    for package in PACKAGES:
        sh("uv", "build", "--package", package, "--wheel", "--out-dir", str(dist))
    wheels = {w.name.split("-")[0]: w for w in dist.glob("*.whl")}
    assert set(wheels) == {"theseus_core", "theseus_models", "theseus_data", "theseus_dispatch"}

    venv = tmp_path / "venv"
    sh("uv", "venv", str(venv), "--python", "python3.11")
    python = str(venv / "bin" / "python")
    sh("uv", "pip", "install", "--python", python, str(wheels["theseus_core"]))
    core_jobs = sh(str(venv / "bin" / "theseus"), "jobs", cwd=tmp_path)
    assert "core/info" in core_jobs
    assert "gpt/" not in core_jobs and "example/" not in core_jobs

    sh("uv", "pip", "install", "--python", python, str(wheels["theseus_models"]))
    with_models = sh(str(venv / "bin" / "theseus"), "jobs", cwd=tmp_path)
    assert "core/info" in with_models
    assert "gpt/train/pretrain" in with_models and "llama/train/pretrain" in with_models
    plugins = sh(str(venv / "bin" / "theseus"), "plugins", cwd=tmp_path)
    assert "theseus-models" in plugins and "theseus-data" not in plugins
