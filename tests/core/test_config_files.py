"""Config files: ``--config`` merges left to right before the overrides, ``config --save``
writes a file that reproduces the run, dict and list keys are typed values, shell completion
of job keys, and ``run --help`` examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import yaml
from theseus.cli.main import complete_job_key, complete_override
from theseus.core.errors import ConfigError, ConfigKeyError, ConfigTypeError
from theseus.core.plugins import registries
from theseus.core.resume import ResumeRefusedError
from theseus.core.runner import config_for, job_spec, prepare, run
from theseus.quick import quick

from tests.core.plugin_factory import env_with, theseus
from tests.train.conftest import TINY

FIT = "example/fit-line"


def resolve(key, overrides=(), configs=()):
    regs = registries()
    return config_for(job_spec(key, regs), regs, overrides, configs=configs)


def write(path, text):
    path.write_text(text)
    return path


def one_line_error(result, expected):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_files_merge_left_to_right_then_the_command_line(tmp_path):
    first = write(tmp_path / "a.yaml", "task:\n  steps: 7\n  seed: 1\noptimizer:\n  name: lion\n")
    second = write(tmp_path / "b.yaml", "task.steps: 9\noptimizer.b1: 0.5\n")  # dotted keys
    tree = resolve(FIT, ["task.seed=5"], [first, second])
    assert tree.node.task.steps == 9  # b.yaml over a.yaml
    assert tree.node.task.seed == 5  # the command line over both
    assert tree.node.optimizer.name == "lion" and tree.node.optimizer.b1 == 0.5
    assert tree.node.task.points == 256  # untouched keys keep their defaults
    # a later file's component choice swaps in that component's schema and defaults
    third = write(tmp_path / "c.yaml", "optimizer: {name: sgd}\n")
    assert "b1" not in resolve(FIT, [], [first, second, third]).node.optimizer

    # the same through the CLI; a key twice on the command line is still an error
    shown = theseus("config", FIT, "-c", str(first), "--config", str(second), "task.seed=5")
    assert shown.returncode == 0, shown.stderr
    assert "  steps: 9  # int in [1, inf):" in shown.stdout
    assert "  seed: 5  # int in [0, inf):" in shown.stdout
    twice = theseus("config", FIT, "--config", str(first), "task.seed=2", "task.seed=3")
    one_line_error(twice, "'task.seed' is given twice on the command line")


def test_file_values_are_typed_by_the_schema(tmp_path):
    typed = write(
        tmp_path / "t.yaml",
        "task: {slope: 2, steps: 4}\noptimizer: {name: adamw, learning_rate: 3e-4}\n",
    )
    tree = resolve(FIT, [], [typed])
    assert tree.node.task.slope == 2.0 and isinstance(tree.node.task.slope, float)
    assert tree.node.optimizer.learning_rate == 3e-4  # YAML reads 3e-4 as a string
    wrong = write(tmp_path / "w.yaml", "task:\n  steps: many\n")
    with pytest.raises(ConfigTypeError, match=r"w.yaml: config key 'task.steps' expects int"):
        resolve(FIT, [], [wrong])
    group = write(tmp_path / "g.yaml", "task: 5\n")
    with pytest.raises(ConfigTypeError, match=r"g.yaml: config key 'task' is a group of keys"):
        resolve(FIT, [], [group])
    # a mapping given to a group sets its keys and keeps the others (file or command line)
    tree = resolve(FIT, ["task={steps: 4}"])
    assert tree.node.task.steps == 4 and tree.node.task.points == 256


def test_config_save_writes_a_file_that_reproduces_the_run(tmp_path):
    overrides = ["optimizer.name=lion", "optimizer.b1=0.8", "task.steps=3", "schedule.every=7"]
    saved = tmp_path / "out" / "fit.yaml"
    done = theseus("config", FIT, *overrides, "--save", str(saved))
    assert done.returncode == 0, done.stderr
    assert f"theseus run {FIT} --config {saved}" in done.stdout
    text = saved.read_text()
    assert text.startswith(f"# {FIT}: the resolved config")
    assert (
        "  steps: 3  # int in [1, inf): optimizer steps" in text
    )  # types and help ride along as comments
    assert yaml.safe_load(text)["optimizer"]["name"] == "lion"
    assert resolve(FIT, [], [saved]).to_container() == resolve(FIT, overrides).to_container()

    # every registered job's defaults, and a training config with presets, a swapped
    # component and dict and list values, survive the round trip exactly
    regs = registries()
    for key, spec in regs.jobs.items():
        tree = config_for(spec, regs)
        path = write(tmp_path / "job.yaml", tree.annotated_yaml())
        assert config_for(spec, regs, configs=[path]).to_container() == tree.to_container(), key
    busy = [
        "model.preset=tiny",
        "model.n_layers=3",
        "optimizer.name=lion",
        "data.mixture={python-stdlib: 1, counting-rhymes: 2.5}",
        "data.tokenizer_options={path: '/tmp/a b: c.json'}",
        "data.suffix='007'",
        "eval.tasks=[val-ppl, addition]",
        "eval.options={hellaswag: {files: hs.jsonl, limit: 2}}",
        "logging.loggers=[tensorboard]",
    ]
    tree = resolve("gpt/train/pretrain", busy)
    path = write(tmp_path / "busy.yaml", tree.annotated_yaml())
    assert resolve("gpt/train/pretrain", [], [path]).to_container() == tree.to_container()


def test_a_runs_own_config_yaml_is_accepted_as_input(root, tmp_path):
    run(FIT, ["task.steps=3", "optimizer.name=sgd", "task.seed=4"], root=root, name="first")
    saved = root / "runs" / "first" / "config.yaml"
    done = theseus(
        "run", FIT, "--config", str(saved), "task.steps=2", "--root", str(root), "--name", "copy"
    )
    assert done.returncode == 0, done.stderr
    first = yaml.safe_load(saved.read_text())
    copy = yaml.safe_load((root / "runs" / "copy" / "config.yaml").read_text())
    assert copy["task"].pop("steps") == 2 and first["task"].pop("steps") == 3
    assert copy == first

    # on a resume the saved config is the base: files act like overrides, checked alike
    same = prepare(FIT, [], root=root, name="first", configs=[saved])
    assert same.changes == []
    other = write(tmp_path / "seed.yaml", "task:\n  seed: 9\n")
    with pytest.raises(ResumeRefusedError, match=r"task.seed: 4 -> 9"):
        prepare(FIT, [], root=root, name="first", configs=[other])
    # the quick API takes files (or mappings) too
    with quick(root) as q:
        q.build(FIT, "quick", config=[saved, {"task": {"steps": 1}}])
        assert q.config.task.seed == 4 and q.config.task.steps == 1


def test_dict_and_list_keys_are_values_with_types_from_cli_and_files(tmp_path):
    key = "gpt/train/pretrain"
    shown = theseus("config", key, "data.mixture={a: 1.0, b: 2.0}", "eval.tasks=[val-ppl]")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "  mixture: {a: 1.0, b: 2.0}  # dict[str, float]: weighted mixture" in shown.stdout
    assert "  tasks: [val-ppl]  # list[str]: registered evaluations" in shown.stdout
    for empty in ("dataset_options: {}  # dict[str, any]", "tokenizer_options: {}  # dict"):
        assert any(line.strip().startswith(empty) for line in lines), empty
    assert any(line.startswith("  options: {}  # dict[str, any]") for line in lines)
    assert any(line.startswith("  loggers: []  # list[str]") for line in lines)
    rows = {row["key"]: row for row in json.loads(theseus("config", key, "--json").stdout)}
    assert rows["data.mixture"]["type"] == "dict[str, float]" and rows["data.mixture"]["help"]
    assert rows["eval.options"]["value"] == {}

    # from files: ints become floats (no OmegaConf warning), a later value replaces whole
    one = write(tmp_path / "one.yaml", "data:\n  mixture: {a: 1, b: 3}\neval:\n  tasks: [x]\n")
    two = write(tmp_path / "two.yaml", "data.mixture: {c: 1.5}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = resolve(key, [], [one])
    assert tree.get("data.mixture") == {"a": 1.0, "b": 3.0}
    assert isinstance(tree.get("data.mixture")["a"], float)
    assert resolve(key, [], [one, two]).get("data.mixture") == {"c": 1.5}
    assert list(resolve(key, ["eval.tasks=[val-ppl]"], [one]).get("eval.tasks")) == ["val-ppl"]
    for bad in ("data.mixture={1: 1.0}", "data.mixture={a: heavy}", "data.mixture=[a]"):
        with pytest.raises(ConfigTypeError, match=r"'data.mixture' expects dict\[str, float\]"):
            resolve(key, [bad])


def test_file_problems_are_one_line_errors_naming_the_file(tmp_path):
    cases = {
        "unknown.yaml": (
            "task:\n  stesp: 3\n",
            "unknown.yaml: unknown config key 'task.stesp' for job example/fit-line; "
            "did you mean 'task.steps'?",
        ),
        "invalid.yaml": ("task:\n  steps: [1, 2\n", "invalid.yaml is not valid YAML"),
        "list.yaml": ("- task.steps: 3\n", "list.yaml holds a YAML list, not a mapping"),
        "twice.yaml": (
            "task:\n  steps: 1\n  steps: 2\n",
            "key 'steps' is given twice (first at line 2) at line 3",
        ),
        "dotted.yaml": (
            "task.steps: 1\ntask:\n  steps: 2\n",
            "dotted.yaml: config key 'task.steps' is given twice",
        ),
    }
    for name, (text, expected) in cases.items():
        path = write(tmp_path / name, text)
        one_line_error(theseus("config", FIT, "--config", str(path)), expected)
    with pytest.raises(ConfigError, match=r"invalid.yaml is not valid YAML: .* at line 3"):
        resolve(FIT, [], [tmp_path / "invalid.yaml"])
    with pytest.raises(ConfigKeyError):
        resolve(FIT, [], [tmp_path / "unknown.yaml"])
    missing = tmp_path / "nope.yaml"
    one_line_error(
        theseus("run", FIT, "--config", str(missing), "--root", str(tmp_path / "root")),
        f"config file {missing} does not exist",
    )
    assert not (tmp_path / "root" / "runs").exists()
    assert resolve(FIT, [], [write(tmp_path / "empty.yaml", "")]).node.task.steps == 300


def test_dry_run_shows_the_config_with_dict_keys_then_the_plan(tmp_path):
    config = write(
        tmp_path / "mix.yaml",
        "data:\n  mixture: {python-stdlib: 1.0}\neval:\n  tasks: [val-ppl]\n",
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-m", "theseus.cli.main", "run", "gpt/train/pretrain", *TINY]
        + ["model.vocab_size=384", "--config", str(config), "--dry-run", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "  mixture: {python-stdlib: 1.0}  # dict[str, float]:" in done.stdout
    assert "  tasks: [val-ppl]  # list[str]:" in done.stdout
    assert "  n_layers: 2  # int in [1, inf):" in done.stdout  # the command line's values
    assert "activations + temps" in done.stdout  # then the job's own plan
    assert not (tmp_path / "runs").exists()


def test_job_keys_complete_without_importing_jax():
    completions = dict(complete_job_key("example/"))
    assert completions == {"example/fit-line": registries().jobs.get(FIT).description}
    assert "gpt/train/pretrain" in dict(complete_job_key("gpt/"))
    assert complete_job_key("no-such/") == []

    class Context:  # what the callback reads of click's context
        params = {"job": FIT}

    keys = dict(complete_override(Context(), "task.st"))
    assert keys == {"task.steps=": "int: optimizer steps"}
    assert complete_override(Context(), "task.steps=1") == []

    # through the shell-completion protocol of Typer's click, as bash calls it
    code = (
        "import sys\nfrom theseus.cli.main import main\n"
        "try:\n    main([])\nexcept SystemExit:\n    pass\n"
        "print('JAX' if 'jax' in sys.modules else 'NOJAX')\n"
    )
    env = env_with(_THESEUS_COMPLETE="complete_bash", COMP_WORDS="theseus run ex", COMP_CWORD="2")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["example/fit-line", "NOJAX"]
    env.update(COMP_WORDS=f"theseus config {FIT} task.se", COMP_CWORD="3")
    done = subprocess.run(
        [sys.executable, "-m", "theseus.cli.main"], capture_output=True, text=True, env=env
    )
    assert done.stdout.split() == ["task.seed="], done.stderr

    script = theseus(
        "--show-completion", "bash", env=env_with(_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    )
    assert script.returncode == 0, script.stderr
    assert "_THESEUS_COMPLETE=complete_bash" in script.stdout
    assert "--install-completion" in theseus("--help", env=env_with(COLUMNS="120")).stdout


def test_run_help_shows_examples():
    done = theseus("run", "--help", env=env_with(COLUMNS="120"))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Examples, in this order" in text  # tests/core/test_help_examples.py runs them
    for example in (
        "theseus config gpt/train/pretrain model.preset=tiny",
        "--save tiny.yaml",
        "theseus run gpt/train/pretrain -c tiny.yaml",
        "--fresh",
        "--branch gpt-train-pretrain@10",
        "--dry-run",
    ):
        assert example in text, example
