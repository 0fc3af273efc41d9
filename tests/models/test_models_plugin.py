"""Registration (the families, their presets, the generate jobs), the service hooks, and the
plugin module staying light."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from theseus.models.families import FAMILIES


def test_registering_imports_no_jax_or_torch():
    code = (
        "import sys, theseus.models.plugin; "
        "print(sorted(m for m in ('jax', 'flax', 'torch') if m in sys.modules))"
    )
    env = {**os.environ, "THESEUS_PLUGINS": "core,models"}  # only what this package owns
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"


def test_families_and_generate_jobs_are_registered():
    from theseus.core.plugins import load_registries

    registries = load_registries()
    for family in FAMILIES:
        component = registries.models.get(family.name)
        assert component.config is family.config and component.target == family.model
        assert component.extra["presets"] is family.presets and "tiny" in family.presets
        assert f"{family.name}/generate" in registries.jobs
        assert family.load_model().config_class is family.config
        assert family.load_hf().config_from_hf  # every family here maps to transformers


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_presets_name_real_fields_and_defaults_have_help(family):
    names = {f.name for f in dataclasses.fields(family.config)}
    for preset, values in family.presets.items():
        assert set(values) <= names, (preset, set(values) - names)
        family.config(**values)
    for f in dataclasses.fields(family.config):
        assert f.metadata.get("help"), f.name


def test_preset_through_the_config_tree(root):
    from theseus.core.runner import prepare

    run = prepare("llama/generate", ["model.preset=8b"], root=root)
    assert run.config.model.d_ff == 14336 and run.config.model.n_kv_heads == 8


def test_generate_job_end_to_end(root, tmp_path):
    import json

    from theseus.core.runner import run
    from theseus.models.hf import save_hf

    from tests.models.conftest import tiny

    save_hf(tiny("llama"), tmp_path / "hf")
    texts = run(
        "llama/generate",
        [
            f"generate.hf_dir={tmp_path / 'hf'}",
            "generate.prompts=['1 2 3', '4 5']",
            "generate.max_new_tokens=4",
        ],
        root=root,
    )
    assert len(texts) == 2 and all(len(t.split()) == 4 for t in texts)
    (folder,) = (root / "runs").glob("llama-generate-*")  # a one-shot job: a fresh name
    lines = (folder / "generations.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["prompt"] == "4 5"


def test_generate_job_on_a_plain_nnx_state(root):
    from flax import nnx
    from theseus.core.runner import prepare
    from theseus.models.generate import generate
    from theseus.models.generate_job import GenerateJob

    from tests.models.conftest import VOCAB, tiny

    model = tiny("gpt")
    run = prepare(
        "gpt/generate",
        [
            "model.preset=tiny",
            f"model.vocab_size={VOCAB}",
            "model.max_seq_len=64",
            "generate.prompts=['5 6 7']",
            "generate.max_new_tokens=3",
        ],
        root=root,
    )
    run.run_dir.path.mkdir(parents=True)
    from theseus.core.jobs import JobContext

    context = JobContext(str(root), run.run_dir, run.registries, {"state": nnx.state(model)})
    texts = GenerateJob(run.tree.to_object(), context)()  # the typed config a job receives
    assert texts == [" ".join(map(str, generate(model, [[5, 6, 7]], max_new_tokens=3)[0]))]


def test_service_hooks_through_the_core_registries(tmp_path):
    import json

    from theseus.core.plugins import registries
    from theseus.models.generate import generate

    from tests.models.conftest import tiny

    hook = registries().hook
    model = tiny("qwen3")
    written = hook.theseus_save_hf_model(model=model, directory=str(tmp_path / "hf"))
    assert written == tmp_path / "hf" and (written / "model.safetensors").is_file()
    loaded = hook.theseus_load_hf_model(directory=str(written), dtype="")
    assert loaded.family == "qwen3" and loaded.config.dtype == "auto"
    assert loaded.dtype.name == "float32"  # auto computes in float32 on CPU
    assert loaded.special_tokens == ()
    bf16 = hook.theseus_load_hf_model(directory=str(written), dtype="bfloat16")
    assert bf16.config.dtype == "bfloat16"

    prompts = [[5, 6, 7], [8, 9]]
    kw = dict(prompts=prompts, max_new_tokens=4, stop_tokens=[], pad_id=0)
    assert hook.theseus_generate(model=loaded, **kw) == generate(model, prompts, max_new_tokens=4)

    # what this plugin does not handle is answered with None, for another plugin to take
    assert hook.theseus_generate(model=object(), **kw) is None
    assert hook.theseus_save_hf_model(model=object(), directory=str(tmp_path / "x")) is None
    (tmp_path / "mamba").mkdir()
    (tmp_path / "mamba" / "config.json").write_text(
        json.dumps({"architectures": ["MambaForCausalLM"]})
    )
    assert hook.theseus_load_hf_model(directory=str(tmp_path / "mamba"), dtype="") is None
