"""A run started from a checkpoint or a Hugging Face folder takes its model config and tokenizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from theseus.core.errors import ConfigError
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir
from theseus.core.runner import config_for, job_spec

REGS = registries()
BASE_MODEL = ["model.n_layers=3", "model.d_model=96", "model.n_heads=3", "model.max_seq_len=96"]


def make_run(root: Path, name: str, overrides: list[str]) -> RunDir:
    """A run's folder as a training writes it before its first step: config.yaml, job.json."""
    tree = config_for(job_spec("gpt/train/pretrain", REGS), REGS, overrides)
    run = RunDir(root, name)
    run.create("gpt/train/pretrain", tree.to_yaml(), None)
    return run


def resolved(root: Path, key: str, overrides: list[str]):
    return config_for(job_spec(key, REGS), REGS, overrides, root=str(root))


def test_checkpoint_run_gives_its_model_and_byte_tokenizer(tmp_path: Path):
    make_run(tmp_path, "base", [*BASE_MODEL, "data.tokenizer=byte"])
    tree = resolved(tmp_path, "gpt/train/sft", ["init.checkpoint=base", "lora.rank=8"])
    assert (tree.get("model.n_layers"), tree.get("model.d_model"), tree.get("model.n_heads")) == (
        3,
        96,
        3,
    )
    assert tree.get("data.tokenizer") == "byte"
    # a resolved SFT config saved and read back (a resume) resolves the same
    again = config_for(
        job_spec("gpt/train/sft", REGS), REGS, [], base=tree.to_container(), root=str(tmp_path)
    )
    assert again.to_container() == tree.to_container()


@pytest.mark.parametrize(
    ("override", "named"),
    [("model.n_layers=2", "model.n_layers=3"), ("data.tokenizer=bpe", "data.tokenizer=byte")],
)
def test_contradicting_the_checkpoint_is_refused(tmp_path: Path, override: str, named: str):
    make_run(tmp_path, "base", [*BASE_MODEL, "data.tokenizer=byte"])
    with pytest.raises(ConfigError, match="init.checkpoint=base was trained with " + named):
        resolved(tmp_path, "gpt/train/sft", ["init.checkpoint=base", override])


def test_free_fields_may_change(tmp_path: Path):
    make_run(tmp_path, "base", [*BASE_MODEL, "data.tokenizer=byte"])
    tree = resolved(
        tmp_path,
        "gpt/train/sft",
        ["init.checkpoint=base", "model.dtype=bfloat16", "model.max_seq_len=64"],
    )
    assert (tree.get("model.dtype"), tree.get("model.max_seq_len")) == ("bfloat16", 64)
    assert tree.get("model.n_layers") == 3


def test_another_family_is_refused(tmp_path: Path):
    make_run(tmp_path, "base", [*BASE_MODEL, "data.tokenizer=byte"])
    with pytest.raises(
        ConfigError, match="init.checkpoint=base is a gpt model; this job trains llama"
    ):
        resolved(tmp_path, "llama/train/sft", ["init.checkpoint=base"])


def test_hf_folder_gives_its_tokenizer(tmp_path: Path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "tokenizer.json").write_text("{}")
    tree = resolved(tmp_path, "llama/train/sft", [f"init.hf={hf}"])
    assert tree.get("data.tokenizer") == "hf"
    assert tree.get("data.tokenizer_options.path") == str(hf)
    with pytest.raises(
        ConfigError, match=r"brings its tokenizer .*data.tokenizer=byte contradicts"
    ):
        resolved(tmp_path, "llama/train/sft", [f"init.hf={hf}", "data.tokenizer=byte"])


def test_cli_refuses_in_one_line_with_exit_2(tmp_path: Path):
    make_run(tmp_path, "base", [*BASE_MODEL, "data.tokenizer=byte"])
    theseus = str(Path(sys.executable).parent / "theseus")
    args = ["init.checkpoint=base", "model.d_model=64", "--root", str(tmp_path), "--dry-run"]
    result = subprocess.run(
        [theseus, "run", "gpt/train/sft", *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert any("model.d_model=96" in line and "drop model.d_model" in line for line in lines)
    assert "Traceback" not in result.stderr
