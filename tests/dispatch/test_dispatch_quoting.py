"""Every dispatch config value is data, never code, in every backend's generated script.

Each string field of each built-in target type (ssh, slurm, volcano, gcp-tpu) is given, in
turn, a value holding ``$(...)``, backticks, ``;`` and both quotes: the config either
refuses it in one line naming the key (a host, a name, an #SBATCH word cannot be that), or
takes it as data. A newline is refused everywhere. Then one config with every field that
took such a value, at once, generates the backend's plan, and its ``bootstrap.sh`` runs in
bash three ways (the shared mount missing; a given Python; uv installing): the values
arrive intact (the fake ``python`` records its arguments and environment) and nothing they
hold ever runs. The end-to-end submit over the loopback sshd is in ``test_dispatch_ssh``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import typing
from pathlib import Path
from typing import Any

import pytest
from dispatch_helpers import REPO
from theseus.core.errors import TheseusError
from theseus.dispatch import config
from theseus.dispatch.bootstrap import Submission, theseus_command
from theseus.dispatch.targets.gcp_tpu import TpuBackend
from theseus.dispatch.targets.slurm import SlurmBackend
from theseus.dispatch.targets.ssh import SSHBackend
from theseus.dispatch.targets.volcano import VolcanoBackend

MARKERS = ("pwned-dollar", "pwned-tick", "pwned-semicolon")
BACKENDS = {"ssh": SSHBackend, "slurm": SlurmBackend, "volcano": VolcanoBackend,
            "gcp-tpu": TpuBackend}  # fmt: skip


def base(kind: str, tmp: Path) -> dict[str, Any]:
    """A valid target of ``kind`` whose folders lie under ``tmp``."""
    folders = {"root": f"{tmp}/shared/theseus", "workdir": f"{tmp}/work"}
    return {
        "ssh": {"type": "ssh", "hosts": ["gpu1.lab"], **folders},
        "slurm": {"type": "slurm", **folders},
        "volcano": {"type": "volcano", "image": "python:3.11", "pvc": "root",
                    "mount_path": f"{tmp}/shared", **folders},
        "gcp-tpu": {"type": "gcp-tpu", "project": "p1", "zone": "us-a1",
                    "accelerator_type": "v5litepod-8", **folders},
    }[kind]  # fmt: skip


def hostile(tmp: Path, field: str) -> str:
    """A path under ``tmp`` (so a script may create it) that a shell would run three ways."""
    return f"{tmp}/{field} $(touch pwned-dollar) `touch pwned-tick`;touch pwned-semicolon;'\"x"


def string_fields(schema: type) -> dict[str, str]:
    """``{field: "str" | "list" | "dict"}`` of every field that holds strings."""
    found = {}
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        text = str(hints[field.name])
        if text.startswith("list[str]"):
            found[field.name] = "list"
        elif text.startswith("dict[str, str]"):
            found[field.name] = "dict"
        elif hints[field.name] is str or text in ("str | None", "typing.Optional[str]"):
            found[field.name] = "str"
    return found


def with_value(kind: str, field: str, text: str, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``field`` holding ``text`` (as its one list entry or mapping value)."""
    value: Any = {"list": [text], "dict": {"NOTE": text}, "str": text}[string_fields(
        config.BUILTIN_SCHEMAS[kind])[field]]  # fmt: skip
    target = {**base, field: value}
    if kind == "volcano" and field in ("mount_path", "root"):  # the root is on the volume
        root = f"{target['mount_path']}/{text if field == 'root' else 'theseus'}"
        target = {**{k: v for k, v in target.items() if k != "root"}, "root": root}
    return target


def plan(kind: str, raw: dict[str, Any], overrides: list[str]) -> str:
    """The backend's ``--dry-run`` plan for ``raw`` (a one-line TheseusError if refused)."""
    target = config.build_target("t", raw, config.BUILTIN_SCHEMAS, "dispatch.yaml")
    sub = Submission(job="core/info", overrides=overrides, name="run1", target="t")
    return BACKENDS[kind]("t", target).plan(sub)


def refusal(call: Any) -> str | None:
    try:
        call()
    except TheseusError as error:
        return str(error)
    return None


def accepted_fields(kind: str, tmp: Path) -> list[str]:
    """The string fields that take a hostile value as data; each other one is refused in one
    line naming it (or what its value would make: the launch folder), and a newline is
    refused in every one."""
    accepted = []
    for field in string_fields(config.BUILTIN_SCHEMAS[kind]):
        value = hostile(tmp, field)
        for text in (value + "\nsecond line", value):
            raw = with_value(kind, field, text, base(kind, tmp))
            message = refusal(lambda raw=raw: plan(kind, raw, []))
            if message is None and "\n" not in text:
                accepted.append(field)
                continue
            assert message is not None, (field, "a newline was taken")
            assert "\n" not in message and field in message, (field, message)
    return accepted


def shell_value(script: str, name: str) -> str:
    """What the script's ``NAME=<word>`` line assigns, as bash reads the word."""
    found = re.search(rf"^{name}=(.*)$", script, re.M)
    assert found is not None, name
    return subprocess.run(["bash", "-c", f"printf %s {found.group(1)}"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


def bootstrap_of(text: str) -> str:
    found = re.search(r"^--- bootstrap\.sh[^\n]*\n(.*)\Z", text, re.S | re.M)
    assert found is not None, text
    return found.group(1)


def fake_program(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


RECORDER = """python3 - "$@" <<'EOF'
import json, os, sys
json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(),
           "env": {k: v for k, v in os.environ.items() if k.startswith(("THESEUS_", "NOTE"))}},
          open(os.environ["RECORD_TO"], "w"))
EOF"""


def no_markers(tmp: Path) -> None:
    """No marker under ``tmp`` (every folder a script went to), nor where a shell may start."""
    for marker in MARKERS:
        assert not list(tmp.rglob(marker)), marker
        for place in (REPO, Path.home(), Path("/")):
            assert not (place / marker).exists(), place / marker


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_every_config_string_is_data_in_every_backend_script(kind, tmp_path):
    accepted = accepted_fields(kind, tmp_path)
    for must_refuse in {"ssh": ["hosts", "user", "chip"], "slurm": ["login", "partition"],
                        "volcano": ["namespace", "image", "pvc"],
                        "gcp-tpu": ["project", "zone", "accelerator_type"]}[kind]:  # fmt: skip
        assert must_refuse not in accepted, must_refuse  # it cannot be a host or a name
    assert {"root", "python", "uv", "env"} <= set(accepted)

    raw = base(kind, tmp_path)
    for field in accepted:
        raw = with_value(kind, field, hostile(tmp_path, field), raw)
    if kind == "volcano":  # the root under the (hostile) volume, itself hostile
        raw = {**raw, "root": f"{raw['mount_path']}/{hostile(tmp_path, 'root')}"}
    override = "logging.wandb.project=" + hostile(tmp_path, "override")
    text = plan(kind, raw, [override])
    target = config.build_target("t", raw, config.BUILTIN_SCHEMAS, "dispatch.yaml")
    mounted = bootstrap_of(text)
    if kind == "volcano":  # its pods' own folders are fixed (not config values): moved here
        mounted = re.sub(r"^(BUNDLE|LAUNCH|WORKDIR)=('?)/theseus-work", rf"\1=\2{tmp_path}/pod",
                         mounted, flags=re.M)  # fmt: skip
    bundle, launch = Path(shell_value(mounted, "BUNDLE")), Path(shell_value(mounted, "LAUNCH"))
    assert bundle.is_relative_to(tmp_path) and launch.is_relative_to(tmp_path), bundle
    launch.mkdir(parents=True)
    script = tmp_path / "bootstrap.sh"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"),
           "RECORD_TO": str(tmp_path / "record.json")}  # fmt: skip

    def run(script_text: str) -> subprocess.CompletedProcess:
        script.write_text(script_text)
        return subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    # 1. the shared mount is missing: exit 93, the message shows the root as it is
    assert shell_value(mounted, "MOUNT") == (target.root_mount or getattr(target, "mount_path", ""))
    done = run(mounted)
    assert done.returncode == 93, done.stdout + done.stderr
    assert f"and the root {target.root} is on it: not starting" in done.stdout
    assert (launch / "exit.0").read_text() == "93\n"
    # 2. a given Python: the fake one records the words and environment it got
    fake_program(Path(target.python), RECORDER)
    bundle.mkdir(parents=True, exist_ok=True)
    unmounted = re.sub(r"^MOUNT=.*$", "MOUNT=''", mounted, flags=re.M)
    done = run(unmounted)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    sub = Submission(job="core/info", overrides=[override], name="run1", target="t")
    assert record["argv"] == theseus_command(sub, target.root)
    assert record["env"]["NOTE"] == target.env["NOTE"]
    assert record["env"]["THESEUS_DISPATCH_TYPE"] == target.type
    assert record["cwd"] == str(bundle) and (launch / "exit.0").read_text() == "0\n"
    # 3. no Python given: the (fake) uv syncs the bundle, and its Python runs
    fake_program(Path(target.uv), 'mkdir -p .venv/bin && cp "$RECORDER_SOURCE" .venv/bin/python')
    env["RECORDER_SOURCE"] = target.python
    (tmp_path / "record.json").unlink()
    done = run(re.sub(r"^PYTHON=.*$", "PYTHON=''", unmounted, flags=re.M))
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "record.json").read_text())["argv"] == record["argv"]
    no_markers(tmp_path)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (["a;touch x"], "key 'hosts': each entry must be a host name or IPv4 address"),
        (["gpu1:99999"], "(port 1 to 65535), got 'gpu1:99999'"),
        (["gpu1:0"], "got 'gpu1:0'"),
        (["me;x@gpu1"], "got 'me;x@gpu1'"),
        (["$(touch x)"], "got '$(touch x)'"),
    ],
)
def test_a_host_that_cannot_be_one_is_refused_in_one_line(hosts, message):
    with pytest.raises(TheseusError) as caught:
        config.build_target(
            "t", {**base("ssh", Path("/x")), "hosts": hosts}, config.BUILTIN_SCHEMAS, "f"
        )
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("f: target 't': key 'hosts'")
    fine = config.build_target(
        "t", {**base("ssh", Path("/x")), "hosts": ["me@gpu-1.lab:2222", "10.0.0.7"]},
        config.BUILTIN_SCHEMAS, "f",
    )  # fmt: skip
    assert fine.hosts == ["me@gpu-1.lab:2222", "10.0.0.7"]
