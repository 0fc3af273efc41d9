"""The dispatch config file: strict validation with errors naming the target and the key;
the bundle's contents; the bootstrap script's quoting."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from theseus.core.errors import ConfigError, TheseusError
from theseus.dispatch import bootstrap, bundle, config
from theseus.dispatch.bootstrap import Submission


def write(tmp: Path, data: dict) -> Path:
    path = tmp / "dispatch.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


SSH = {"type": "ssh", "hosts": ["a.lab", "b.lab:2222"], "root": "/data/theseus"}
VOLCANO = {"type": "volcano", "root": "/shared/theseus", "image": "python:3.11", "pvc": "root",
           "mount_path": "/shared"}  # fmt: skip


def test_valid_config_and_priority(tmp_path):
    slurm = {
        "type": "slurm",
        "root": "/shared",
        "partition": "gpu",
        "chip": "h100",
        "chips_per_node": 8,
    }
    loaded = config.load(
        write(tmp_path, {"targets": {"box": SSH, "hpc": slurm}, "priority": ["hpc"]})
    )
    assert loaded.priority == ["hpc", "box"]
    assert loaded.targets["box"].hosts == ["a.lab", "b.lab:2222"]
    assert loaded.targets["box"].known_hosts == "~/.ssh/known_hosts"
    assert loaded.targets["box"].insecure_skip_host_key_check is False
    assert loaded.targets["hpc"].chips_per_node == 8 and loaded.targets["hpc"].group == "cpu"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            {**SSH, "hosst": ["x"]},
            "target 'box': unknown key 'hosst' for type ssh; did you mean 'hosts'?",
        ),
        ({**SSH, "port": "22"}, "target 'box': key 'port': expected an integer, got '22'"),
        ({**SSH, "hosts": "a.lab"}, "target 'box': key 'hosts': expected a list, got 'a.lab'"),
        (
            {**SSH, "insecure_skip_host_key_check": "yes"},
            "target 'box': key 'insecure_skip_host_key_check': expected true or false, got 'yes'",
        ),
        ({"type": "ssh", "hosts": ["a"]}, "target 'box': missing required key(s): root"),
        (
            {**SSH, "type": "k8s"},
            "target 'box': key 'type' must be one of gcp-tpu, slurm, ssh, volcano, got 'k8s'",
        ),
        (
            {**SSH, "group": "rocm"},
            "target 'box': key 'group' must be one of cpu, cuda12, cuda13, tpu",
        ),
        ({**SSH, "nodes": 0}, "target 'box': key 'nodes' must be at least 1"),
        ({**SSH, "env": {"A": 1}}, "target 'box': key 'env.A': expected str, got 1"),
        (
            {**SSH, "secrets": ["K"], "env": {"K": "v"}},
            "target 'box': 'K' is both in 'env' and 'secrets'",
        ),
        ({"type": "volcano", "root": "/r"}, "target 'box': missing required key(s): image"),
        (
            {**VOLCANO, "root": "/data/theseus"},
            "target 'box': key 'root' '/data/theseus' is not under mount_path '/shared', where "
            "the PVC 'root' is mounted: the run would be written to the pod's own disk; set "
            "root to a folder under /shared",
        ),
        (
            {**VOLCANO, "root": "/sharedx/theseus"},  # a sibling whose name starts the same
            "target 'box': key 'root' '/sharedx/theseus' is not under mount_path '/shared'",
        ),
        (
            {k: v for k, v in VOLCANO.items() if k != "pvc"},
            "target 'box': key 'pvc' is not set: the root would be on each pod's own disk",
        ),
    ],
)
def test_config_errors_name_target_and_key(tmp_path, target, message):
    path = write(tmp_path, {"targets": {"box": target}})
    with pytest.raises(ConfigError) as error:
        config.load(path)
    assert str(error.value).startswith(f"{path}: {message}"), str(error.value)


def test_config_file_level_errors(tmp_path):
    with pytest.raises(ConfigError, match="no dispatch config at"):
        config.load(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\) \['target'\]"):
        config.load(write(tmp_path, {"target": {}}))
    with pytest.raises(ConfigError, match="'priority' names unknown target 'gone'"):
        config.load(write(tmp_path, {"targets": {"box": SSH}, "priority": ["gone"]}))


def test_cli_reports_config_error_in_one_line(cli):
    cli.write({"box": {**SSH, "hosst": ["x"]}})
    done = cli("submit", "core/info", "--dry-run", check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {cli.config}: target 'box': unknown key 'hosst' for type ssh; did you mean 'hosts'?"
    )


def test_bundle_has_uncommitted_work_and_no_outputs(tmp_path):
    work = tmp_path / "ws"
    work.mkdir()
    (work / "pyproject.toml").write_text("[project]\nname='x'\n")
    (work / "uv.lock").write_text("version = 1\n")
    (work / ".gitignore").write_text("runs/\n.venv/\n")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "add", "."], cwd=work, check=True)
    (work / "new.py").write_text("print('uncommitted')\n")
    for d in ("runs/r", ".venv/bin", "pkg/__pycache__"):
        (work / d).mkdir(parents=True)
        (work / d / "f").write_text("x")
    found = bundle.find_workspace(work / "pkg")
    assert found == work
    first = bundle.make_bundle(work)
    assert first.files == [".gitignore", "new.py", "pyproject.toml", "uv.lock"]
    names = tarfile.open(fileobj=io.BytesIO(first.data)).getnames()
    assert names == first.files
    assert bundle.make_bundle(work).sha == first.sha  # deterministic: same tree, same bundle
    (work / "new.py").write_text("print('changed')\n")
    assert bundle.make_bundle(work).sha != first.sha
    (work / "leak.txt").write_text("token=sk-abcdef0123456789\n")
    with pytest.raises(
        TheseusError, match="leak.txt contains the value of the secret WANDB_API_KEY"
    ):
        bundle.make_bundle(work, secrets={"WANDB_API_KEY": "sk-abcdef0123456789"})
    with pytest.raises(TheseusError, match="no uv workspace"):
        bundle.find_workspace(tmp_path)


def test_bootstrap_quotes_every_value(tmp_path):
    target = config.build_target(
        "box", {**SSH, "env": {"NOTE": "$(touch pwned); touch pwned"}}, config.BUILTIN_SCHEMAS, "f"
    )
    sub = Submission(
        job="core/info",
        overrides=["a.b=$(touch pwned)", "c=x; touch pwned"],
        name="r",
        target="box",
    )
    paths = bootstrap.Paths(workdir="/w", root="/data/x y", bundle_dir="/w/b", launch_dir="/w/l")
    text = bootstrap.script(sub, target, paths)
    assert "export NOTE='$(touch pwned); touch pwned'" in text
    assert "'a.b=$(touch pwned)' 'c=x; touch pwned' --root '/data/x y' --name r" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    # run the quoted command line through a real shell: the words arrive intact, nothing runs
    words = text.rsplit('"$PYTHON" ', 1)[1].split("\n", 1)[0]
    echoed = subprocess.run(
        f"printf '%s\\n' {words}",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert echoed[3:7] == ["core/info", "a.b=$(touch pwned)", "c=x; touch pwned", "--root"]
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(TheseusError, match="environment variable name 'A B' is not valid"):
        bootstrap.secrets_file({"A B": "v"})


def test_submitted_one_shot_jobs_get_a_new_default_name_and_trainings_the_keys():
    import re

    from theseus.core.plugins import registries
    from theseus.dispatch.submit import resolve

    name, _ = resolve(registries(), "core/info", [], None)
    assert re.fullmatch(r"core-info-\d{8}-\d{6}", name), name
    assert resolve(registries(), "core/info", [], "mine")[0] == "mine"
    assert resolve(registries(), "gpt/train/pretrain", [], None)[0] == "gpt-train-pretrain"


def test_the_dispatch_log_stream_is_redacted(monkeypatch):
    import io

    from theseus.core.redaction import REDACTED
    from theseus.dispatch.cli import RedactedStream

    monkeypatch.setenv("THESEUS_TEST_API_KEY", "k3y-value-of-the-test")
    out = io.StringIO()
    stream = RedactedStream(out)
    for chunk in ("step 1 api_key=ab", "c\nusing k3y-value-of", "-the-test now\nlast"):
        stream.write(chunk)
    stream.close()
    assert out.getvalue() == f"step 1 api_key={REDACTED}\nusing {REDACTED} now\nlast"
