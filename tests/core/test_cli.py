"""The CLI: one-line errors with exit code 2, -v tracebacks, fast listing without JAX."""

from __future__ import annotations

import subprocess
import sys

from tests.core.plugin_factory import env_with, theseus


def test_run_through_the_cli_prints_the_run_directory(root):
    result = theseus(
        "run", "example/fit-line", "task.steps=5", "--root", str(root), "--name", "cli"
    )
    assert result.returncode == 0, result.stderr
    assert f"run cli: {root}/runs/cli" in result.stdout
    assert (root / "runs" / "cli" / "result.json").exists()


def test_root_defaults_to_the_environment_variable(root):
    result = theseus(
        "run", "example/fit-line", "task.steps=2", env=env_with(THESEUS_ROOT=str(root))
    )
    assert result.returncode == 0, result.stderr
    assert (root / "runs" / "example-fit-line" / "job.json").exists()


def test_user_mistakes_print_one_line_and_exit_2(root):
    cases = {
        ("run", "example/fit-line", "task.steps=x"): "'task.steps' expects int, got 'x'",
        ("run", "example/fit-line", "optimizer.lr=1"): "did you mean 'optimizer.learning_rate'",
        ("run", "example/fit-line", "task.seed=1", "task.seed=2"): "'task.seed' is given twice",
        ("run", "nope/job"): "unknown job 'nope/job'",
        ("run", "example/fit-line", "--name", "../x"): "run name '../x' is invalid",
        ("config", "example/fit-line", "optimizer.name=nadam"): "unknown optimizer 'nadam'",
        # the model checks `run` makes: 8 key/value heads cannot serve 30 query heads
        ("config", "llama/train/pretrain", "model.n_heads=30", "model.n_kv_heads=8"): (
            "model.n_kv_heads=8 must divide model.n_heads=30"
        ),
    }
    for args, expected in cases.items():
        result = theseus(*args, "--root", str(root)) if args[0] == "run" else theseus(*args)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (root / "runs").exists() or not any((root / "runs").iterdir())


def test_verbose_shows_the_traceback(root):
    result = theseus("-v", "run", "example/fit-line", "task.steps=x", "--root", str(root))
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "ConfigTypeError" in result.stderr


def test_usage_errors_exit_2():
    result = theseus("run")
    assert result.returncode == 2
    assert "Missing argument" in result.stderr


def test_jobs_lists_keys_without_importing_jax():
    code = (
        "import sys; from theseus.cli.main import main\n"
        "try:\n    main(['jobs', 'example'])\nexcept SystemExit:\n    pass\n"
        "assert 'jax' not in sys.modules, 'jax was imported'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('NOJAX')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "example/fit-line" in result.stdout and "NOJAX" in result.stdout
    assert "core/info" not in result.stdout  # the prefix filters


def test_the_model_preset_help_names_a_command_that_lists_the_presets():
    """Before (issue 35): the help said "see `theseus jobs`", which lists no preset."""
    from theseus.core.plugins import registries

    config = theseus("config", "gpt/train/pretrain")
    line = next(line for line in config.stdout.splitlines() if line.strip().startswith("preset:"))
    named = line.split("`")[1].split()  # the command the help names, e.g. theseus presets
    assert named[0] == "theseus"
    listing = theseus(*named[1:], env=env_with(COLUMNS="200"))
    assert listing.returncode == 0, listing.stderr
    for model, component in registries().models.items():
        row = next(line for line in listing.stdout.splitlines() if line.split()[:1] == [model])
        assert all(preset in row for preset in component.extra["presets"]), row
    gpt = theseus(*named[1:], "gpt", env=env_with(COLUMNS="200"))
    assert gpt.returncode == 0, gpt.stderr
    assert "n_layers=12 d_model=768 n_heads=12" in gpt.stdout  # what 124m sets
    unknown = theseus(*named[1:], "gtp")
    assert unknown.returncode == 2 and "did you mean 'gpt'?" in unknown.stderr
