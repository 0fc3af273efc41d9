"""Registration: the families, their presets, the generate jobs; the plugin module stays light."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from theseus.models.configs import FAMILIES, PRESETS


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
    for name, (config, target, _) in FAMILIES.items():
        component = registries.models.get(name)
        assert component.config is config and component.target == target
        assert "tiny" in component.extra["presets"]
        assert f"{name}/generate" in registries.jobs


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_presets_name_real_fields_and_defaults_have_help(family):
    config = FAMILIES[family][0]
    names = {f.name for f in dataclasses.fields(config)}
    for preset, values in PRESETS[family].items():
        assert set(values) <= names, (preset, set(values) - names)
        config(**values)
    for f in dataclasses.fields(config):
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
    lines = (root / "runs" / "llama-generate" / "generations.jsonl").read_text().splitlines()
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
    texts = GenerateJob(run.config, context)()
    assert texts == [" ".join(map(str, generate(model, [[5, 6, 7]], max_new_tokens=3)[0]))]
