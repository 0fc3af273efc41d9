"""The metric loggers get the resolved config: wandb (offline) and TensorBoard files are read
back; wandb online without credentials stops in one line before any step, without starting
wandb. Training runs go through the CLI in a subprocess whose HOME is an empty directory and
whose environment holds no W&B variable, so no key of the machine's user can leak in."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from theseus.core.errors import ConfigError
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir
from theseus.core.runner import config_for, job_spec
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.loggers import LoggerError, WandbLogger, build_loggers, wandb_credentials

from tests.train.conftest import TINY, metrics, theseus_cmd

STEPS = 3


@pytest.fixture(scope="module")
def logger_root(tmp_path_factory) -> Path:
    """One root for this module's runs, so the corpus is tokenized once."""
    return tmp_path_factory.mktemp("loggers-root")


def isolated_env(home: Path) -> dict[str, str]:
    """This environment without W&B variables or netrc, HOME an empty directory, and a W&B
    server address nothing listens on: whatever tried to reach W&B would fail, not hang."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), WANDB_BASE_URL="http://127.0.0.1:9")
    return env


def train(root: Path, name: str, home: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = ["run", "gpt/train/pretrain", *TINY, f"training.total_steps={STEPS}", "eval.every=0"]
    args += [*overrides, "--root", str(root), "--name", name]
    return subprocess.run(
        theseus_cmd(*args), capture_output=True, text=True, env=isolated_env(home), timeout=600
    )


# ---------------------------------------------------------------------- reading the files back


def wandb_records(path: Path) -> list:
    """The records of a ``run-<id>.wandb`` file: a 7-byte header (``:W&B``, magic, version),
    then LevelDB-log blocks of 32 KiB holding chunks (crc32, length, type) of protobuf
    ``Record``s (types: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:8]
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if length == 0 and kind == 0:  # zeroed rest of a block
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def tensorboard_events(directory: Path) -> list:
    """Every ``Event`` of the event files in ``directory`` (TFRecord framing: u64 length,
    u32 crc of it, the bytes, u32 crc of them)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = Event()
            event.ParseFromString(data[pos + 12 : pos + 12 + length])
            events.append(event)
            pos += 12 + length + 4
    return events


# ---------------------------------------------------------------------- the tests


def test_wandb_offline_and_tensorboard_get_the_resolved_config_and_the_scalars(
    logger_root, tmp_path
):
    name = "logged"
    result = train(
        logger_root,
        name,
        tmp_path / "home",
        "logging.loggers=[tensorboard,wandb]",
        "logging.wandb.mode=offline",
        "logging.wandb.project=theseus-tests",
        "logging.wandb.tags=[tiny,ci]",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = logger_root / "runs" / name
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["logging"]["wandb"]["mode"] == "offline"
    losses = {r["step"]: r["train/loss"] for r in metrics(logger_root, name) if "train/loss" in r}
    assert sorted(losses) == list(range(STEPS))

    # wandb: one offline run, id = the run's name, the whole config, the losses by step
    (wandb_file,) = (run / "wandb").glob(f"offline-run-*/run-{name}.wandb")
    records = wandb_records(wandb_file)
    (started,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (started.run_id, started.project, list(started.tags)) == (
        name,
        "theseus-tests",
        ["tiny", "ci"],
    )
    config = {item.key: json.loads(item.value_json) for item in started.config.update}
    config.pop("_wandb", None)
    assert config == saved
    history = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            if "train/loss" in items:
                history[items["_step"]] = items["train/loss"]
    assert history == losses

    # TensorBoard: the scalars (float32) by step, the config as YAML text and as hparams
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    scalars, texts, hparams = {}, {}, {}
    for event in tensorboard_events(run / "tensorboard"):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
            elif value.metadata.plugin_data.plugin_name == "text":
                texts[value.tag] = value.tensor.string_val[0].decode()
            elif value.tag == "_hparams_/session_start_info":
                data = HParamsPluginData()
                data.ParseFromString(value.metadata.plugin_data.content)
                hparams = data.session_start_info.hparams
    assert scalars["train/loss"] == {s: float(np.float32(v)) for s, v in losses.items()}
    assert yaml.safe_load(textwrap.dedent(texts["config/text_summary"])) == saved
    assert hparams["optimizer.name"].string_value == saved["optimizer"]["name"]
    assert hparams["training.total_steps"].number_value == STEPS
    assert hparams["logging.wandb.project"].string_value == "theseus-tests"


def test_wandb_online_without_credentials_stops_in_one_line_before_any_step(logger_root, tmp_path):
    name = "no-key"
    result = train(logger_root, name, tmp_path / "empty-home", "logging.loggers=[wandb]")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "credentials" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0] == (
        "error: logging.loggers=[wandb] logs online but no W&B credentials were found: run "
        "`wandb login` or set WANDB_API_KEY, or set logging.wandb.mode=offline "
        "(`wandb sync` uploads later)"
    )
    run = logger_root / "runs" / name
    assert not (run / "wandb").exists()  # wandb.init was never called
    rows = metrics(logger_root, name) if (run / "metrics.jsonl").exists() else []
    assert not [r for r in rows if "train/loss" in r]
    assert not list((run / "checkpoints").glob("[0-9]*"))


def typed_config(*overrides: str) -> TrainJobConfig:
    regs = registries()
    return config_for(job_spec("gpt/train/pretrain", regs), regs, list(overrides)).to_object(
        TrainJobConfig
    )


def test_wandb_options_are_typed_and_the_mode_is_checked():
    config = typed_config(
        "logging.wandb.project=p", "logging.wandb.tags=[a,b]", "logging.wandb.mode=disabled"
    )
    assert config.logging.wandb.tags == ["a", "b"] and config.logging.wandb.mode == "disabled"
    with pytest.raises(
        ConfigError, match=r"^logging.wandb.mode='onlin': expected one of '', online"
    ):
        typed_config("logging.wandb.mode=onlin")


def test_credentials_come_from_the_environment_or_netrc_and_offline_needs_none(
    tmp_path, monkeypatch
):
    for variable in [k for k in os.environ if k.startswith("WANDB_")] + ["NETRC"]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    online = {"logging": {"wandb": {"mode": "online"}}}
    assert wandb_credentials() is None
    with pytest.raises(LoggerError, match="wandb login"):
        WandbLogger.check(online)
    WandbLogger.check({"logging": {"wandb": {"mode": "offline"}}})
    monkeypatch.setenv("WANDB_MODE", "offline")  # wandb's own variable, when the key is ''
    WandbLogger.check({})
    monkeypatch.setenv("WANDB_MODE", "")  # wandb itself fails on this with a long traceback
    with pytest.raises(LoggerError, match="WANDB_MODE=''"):
        WandbLogger.check({})
    monkeypatch.delenv("WANDB_MODE")

    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert wandb_credentials() == str(tmp_path / ".netrc")
    WandbLogger.check(online)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")  # another server
    assert wandb_credentials() is None
    monkeypatch.setenv("WANDB_API_KEY", "abc123")
    assert wandb_credentials() == "WANDB_API_KEY"


class _Component:
    def __init__(self, cls):
        self.cls = cls

    def load(self):
        return self.cls


class _Registries:
    def __init__(self, **classes):
        self.loggers = {name: _Component(cls) for name, cls in classes.items()}


def test_loggers_get_the_config_and_one_argument_loggers_still_work(tmp_path):
    built = []

    class WithConfig:
        def __init__(self, run_dir, config):
            built.append(("with", run_dir.name, config))

        def close(self):
            pass

    class RunDirOnly:  # a third-party logger written for the earlier contract
        def __init__(self, run_dir):
            built.append(("only", run_dir.name))

        def close(self):
            pass

    run = RunDir(tmp_path, "r")
    run.path.mkdir(parents=True)
    (run.path / "config.yaml").write_text("training:\n  seed: 3\n")
    regs = _Registries(a=WithConfig, b=RunDirOnly)
    build_loggers(regs, ["a", "b"], run)  # the config comes from the run's config.yaml
    assert built == [("with", "r", {"training": {"seed": 3}}), ("only", "r")]
    built.clear()
    build_loggers(regs, ["a"], run, typed_config("training.seed=5"))  # or typed, as a dict
    assert built[0][2]["training"]["seed"] == 5
