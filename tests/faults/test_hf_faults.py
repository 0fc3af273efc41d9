"""Hugging Face folders: an export never replaces another model's files by surprise, and a
damaged folder is one line naming the file, exit 2.

Before (issue 24): ``hf/export`` into another model's folder replaced its config.json and
model.safetensors with exit 0, and into a sharded folder left the old index and shards
beside the new weights; a garbage ``config.json`` (57 lines), a ``config.json`` holding a
JSON list (49), a truncated safetensors file (112) and ``hf.dir`` naming a file (61) all
ended in tracebacks with exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.faults.test_locks import snapshot
from tests.train.conftest import TINY, run_cli


@pytest.fixture(scope="module")
def exported(shared_root, tmp_path_factory) -> Path:
    """A one-step tiny GPT run, exported once into a folder of its own."""
    args = ["run", "gpt/train/pretrain", *TINY, "training.total_steps=1", "eval.every=0"]
    done = run_cli(shared_root, *args, "--name", "hf-fault-base")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path_factory.mktemp("hf-faults") / "exported"
    done = export(shared_root, folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def export(root: Path, folder: Path, *extra: str):
    """``hf/export`` of the base run into ``folder``, as a run of its own (one per folder)."""
    name = f"export-{folder.parent.name}-{folder.name}"[:60]
    args = ["run", "hf/export", "hf.run=hf-fault-base", f"hf.dir={folder}", "--name", name]
    return run_cli(root, *args, *extra)


def one_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def test_an_export_into_another_models_folder_is_refused_untouched(shared_root, exported, tmp_path):
    other = tmp_path / "someone-else"
    shutil.copytree(exported, other)
    (other / "config.json").write_text('{"architectures": ["SomethingElse"]}')
    before = snapshot(other)
    line = one_line(export(shared_root, other))
    assert line.startswith(f"error: hf.dir: {other} is not empty (config.json, ")
    assert line.endswith("set hf.overwrite=true to replace the model files there")
    assert snapshot(other) == before


def test_overwrite_replaces_the_whole_model_stale_shards_and_index_included(
    shared_root, exported, tmp_path
):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    index = {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (sharded / shard).write_bytes(b"old shard")
    (sharded / "config.json").write_text("{}")
    (sharded / "README.md").write_text("not a model file: kept")
    done = export(shared_root, sharded, "hf.overwrite=true")
    assert done.returncode == 0, done.stderr[-3000:]
    written = sorted(p.name for p in sharded.iterdir())
    assert written == sorted([*(p.name for p in exported.iterdir()), "README.md"])
    assert "model.safetensors.index.json" not in written
    for name in ("config.json", "model.safetensors"):  # the same run: the same bytes
        assert (sharded / name).read_bytes() == (exported / name).read_bytes(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".sharded.export-")]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("garbage", "config.json is not a JSON config (Expecting value: line 1 column 1"),
        ("list", "config.json holds a JSON list, not an object of config keys"),
        ("truncated", "model.safetensors is not a readable safetensors file ("),
    ],
)
def test_a_damaged_folder_is_one_line_naming_the_file(
    shared_root, exported, tmp_path, damage, expected
):
    folder = tmp_path / f"damaged-{damage}"
    shutil.copytree(exported, folder)
    if damage == "garbage":
        (folder / "config.json").write_text("this is { not json")
    elif damage == "list":
        (folder / "config.json").write_text("[1, 2, 3]")
    else:
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    name = f"imported-{damage}"
    line = one_line(run_cli(shared_root, "run", "hf/import", f"hf.dir={folder}", "--name", name))
    assert line.startswith(f"error: {folder}/") and expected in line, line
    assert not (shared_root / "runs" / name).exists()  # refused before the run folder exists


def test_a_config_json_nested_100000_deep_is_one_line(tmp_path):
    """Before: a RecursionError traceback from ``hf/import`` (the same reader serves
    ``init.hf``, tokenizer files, job.json and jsonl corpora: :mod:`theseus.core.safe_json`)."""
    from theseus.core.data.errors import DataError
    from theseus.core.data.format import read_json
    from theseus.models.errors import ModelError
    from theseus.models.hf.files import read_config

    text = '{"a": ' * 100_000 + "1" + "}" * 100_000
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ModelError) as caught:
        read_config(tmp_path)
    assert str(caught.value).startswith(
        f"{tmp_path}/config.json is not a JSON config (arrays or objects nested deeper than the "
        "decoder can follow"
    )
    with pytest.raises(DataError, match="nested deeper than the decoder can follow"):
        read_json(tmp_path / "config.json")


def test_hf_dir_naming_a_file_is_one_line_for_import_and_export(shared_root, exported, tmp_path):
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"not a folder")
    assert one_line(export(shared_root, a_file)) == (
        f"error: hf.dir: {a_file} is a file, not a folder; choose a folder to export into"
    )
    imported = run_cli(shared_root, "run", "hf/import", f"hf.dir={a_file}", "--name", "from-file")
    assert one_line(imported) == f"error: hf.dir: {a_file} is not a folder"
    # a folder under a file: a FileExistsError traceback and a failed run folder before
    below = a_file / "sub"
    assert one_line(export(shared_root, below)) == (
        f"error: hf.dir: {below} cannot be made: {a_file} is a file, not a folder; choose a "
        "folder to export into"
    )
    assert not list((shared_root / "runs").glob(f"export-{a_file.name}-sub*"))
    assert a_file.read_bytes() == b"not a folder"


def test_weights_the_config_does_not_describe_are_refused_not_dropped(
    shared_root, exported, tmp_path
):
    """Before (issue 37): a config.json saying 1 layer beside weights of 2 imported with exit
    0 and dropped the second layer."""
    folder = tmp_path / "one-layer-config"
    shutil.copytree(exported, folder)
    config = json.loads((folder / "config.json").read_text())
    config["n_layer"] = config["n_layer"] - 1
    (folder / "config.json").write_text(json.dumps(config))
    done = run_cli(shared_root, "run", "hf/import", f"hf.dir={folder}", "--name", "dropped")
    line = one_line(done)
    assert f"'transformer.h.{config['n_layer']}." in line, line  # the first layer too many
    assert "is used by no part of the model config.json describes" in line, line


@pytest.mark.parametrize(
    ("family", "lacking"),
    [("deepseek_v3", "kv_lora_rank"), ("deepseek_v3", "n_routed_experts"), ("gemma3", "head_dim")],
)
def test_a_config_json_lacking_a_key_the_family_reads_is_one_line(family, lacking):
    """Before (issue 37): a 49-line KeyError traceback, exit 1."""
    from theseus.models.errors import ModelError
    from theseus.models.families import family_named
    from theseus.models.hf.checkpoint import config_from_hf, config_to_hf

    spec = family_named(family)
    config = spec.config(preset="tiny", **{**spec.presets["tiny"], "vocab_size": 97})
    hf = config_to_hf(family, config)
    assert lacking in hf
    del hf[lacking]
    with pytest.raises(ModelError) as refused:
        config_from_hf(hf)
    assert str(refused.value) == (
        f"config.json lacks {lacking!r}, which a {family} model needs (model_type "
        f"{hf['model_type']!r})"
    )


def test_exported_files_take_the_umask_mode_not_0600(shared_root, exported, tmp_path):
    """Before (issue 35): model.safetensors was written 0600 (by safetensors) whatever the
    umask, so nobody else could read an export in a shared folder."""
    folder = tmp_path / "shared"
    saved = os.umask(0o027)  # the export process inherits it
    try:
        done = export(shared_root, folder)
    finally:
        os.umask(saved)
    assert done.returncode == 0, done.stderr[-3000:]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}
    assert modes.pop(folder.name) == 0o750
    assert "model.safetensors" in modes and set(modes.values()) == {0o640}, modes
