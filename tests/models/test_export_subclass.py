"""``hf/export`` of a subclass of a family: refused unless the subclass says its parent's
Hugging Face mapping is exact for it (``hf_mapping_exact = True`` in its own body).

The subclass here soft-caps the attention scores (Gemma 2 style): its parameters are a
Llama's, so the Llama mapping would write them without complaint, and transformers would
then run a plain Llama, a different model.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from theseus.models.errors import ModelError
from theseus.models.hf import family_of, save_hf
from theseus.models.layers.lora import adapted_class
from theseus.models.llama.model import Llama

from tests.core.plugin_factory import write_plugin
from tests.models.conftest import VOCAB, tiny
from tests.models.test_models_composition import SoftCappedLlama, cap, with_params_of
from tests.train.conftest import TINY

REFUSED = (
    r"tests\.models\.test_models_composition\.SoftCappedLlama subclasses Llama \(llama\) and "
    r"declares no Hugging Face mapping of its own: exporting it would silently reuse Llama's "
    r"\(LlamaForCausalLM\).*set hf_mapping_exact = True in SoftCappedLlama"
)


class ExactLlama(Llama):
    """A subclass that computes what Llama computes (say, extra logging): it says so."""

    hf_mapping_exact = True


class ChangedExactLlama(ExactLlama):
    """Inherits the flag but not the promise: a subclass must declare it itself."""

    attention_cls = SoftCappedLlama.attention_cls


def test_a_subclass_that_changes_the_model_is_refused(tmp_path):
    base = tiny("llama")
    capped = with_params_of(SoftCappedLlama, base)
    x = jax.random.randint(jax.random.key(0), (1, 8), 0, VOCAB)
    with cap(1e-3):  # the export would describe `base`, which computes something else
        assert np.abs(capped(x) - base(x)).max() > 1e-5
    with pytest.raises(ModelError, match=REFUSED):
        save_hf(capped, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written
    assert "\n" not in str(pytest.raises(ModelError, family_of, SoftCappedLlama).value)


def test_a_subclass_declaring_the_parents_mapping_exact_exports_as_the_parent(tmp_path):
    model = with_params_of(ExactLlama, tiny("llama"))
    assert family_of(model).name == "llama"
    folder = save_hf(model, tmp_path / "out")
    assert '"LlamaForCausalLM"' in (folder / "config.json").read_text()
    with pytest.raises(ModelError, match="ChangedExactLlama subclasses Llama"):
        family_of(ChangedExactLlama)


def test_lora_classes_keep_their_bases_mapping():
    class Lora:
        rank, alpha, dropout, targets = 2, 4.0, 0.0, ("attention",)

    assert family_of(adapted_class(Llama, Lora)).name == "llama"
    with pytest.raises(ModelError, match="SoftCappedLlama subclasses Llama"):
        family_of(adapted_class(SoftCappedLlama, Lora))
    assert family_of(nnx.Module) is None  # no family at all: not a refusal


PLUGIN = """
from theseus.core.components import Component
from theseus.core.hookspecs import hookimpl
from theseus.models.families import family_named


@hookimpl
def theseus_register_models(register):
    llama = family_named("llama")
    register(
        Component(
            "softllama",
            llama.config,
            "tests.models.test_models_composition:SoftCappedLlama",
            "Llama with soft-capped attention scores",
            extra={"presets": llama.presets},
        )
    )
"""


@pytest.fixture
def soft_registries(tmp_path, monkeypatch):
    from theseus.core import plugins

    site = tmp_path / "site"
    write_plugin(site, "soft-dist", "soft", "soft_plugin", PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    yield plugins.registries(reload=True)
    monkeypatch.undo()
    plugins.registries(reload=True)


@pytest.mark.slow
def test_hf_export_refuses_a_run_of_the_subclass_before_any_work(root, soft_registries):
    from theseus.core.runner import prepare, run

    overrides = [*TINY, "model.d_ff=128", "training.total_steps=1", "eval.every=0"]
    run("softllama/train/pretrain", overrides, root=root, name="soft")
    export = prepare("hf/export", ["hf.run=soft", f"hf.dir={root / 'out'}"], root=root)
    with pytest.raises(ModelError, match="SoftCappedLlama subclasses Llama"):
        export()
    assert not export.run_dir.path.exists() and not (root / "out").exists()


# ------------------------------------------------------- the example of docs/plugins.md


def doc_blocks() -> tuple[str, str]:
    """The model module and the hook of docs/plugins.md's section on changing one stage."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
    section = text.split("## Changing one stage of an existing family", 1)[1].split("\n## ")[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 2 and blocks[0].startswith("# softcap_llama.py"), blocks
    return blocks[0], blocks[1]


@pytest.fixture
def doc_registries(tmp_path, monkeypatch):
    from theseus.core import plugins

    model, hook = doc_blocks()
    site = tmp_path / "site"
    write_plugin(site, "softcap-dist", "softcap", "softcap_plugin", hook)
    (site / "softcap_llama.py").write_text(model)
    monkeypatch.syspath_prepend(str(site))
    yield plugins.registries(reload=True)
    monkeypatch.undo()
    plugins.registries(reload=True)


def test_the_documented_subclass_takes_its_field_to_every_layer_and_is_refused_export(
    doc_registries, tmp_path
):
    from theseus.core.runner import config_for, job_spec

    tree = config_for(
        job_spec("softllama/train/pretrain", doc_registries),
        doc_registries,
        ["model.preset=tiny", "model.attn_cap=0.5", f"model.vocab_size={VOCAB}"],
    )
    config = tree.get("model")
    assert config["n_layers"] == 2 and config["attn_cap"] == 0.5  # the preset, the new field
    component = doc_registries.models.get("softllama")
    typed = component.config(**{k: v for k, v in config.items() if k != "name"})
    model = component.load()(typed, rngs=nnx.Rngs(params=0))
    caps = [block.attention.cap for block in model.unrolled().blocks]
    assert caps == [0.5] * typed.n_layers
    base = with_params_of(Llama, model)
    x = jax.random.randint(jax.random.key(1), (1, 8), 0, VOCAB)
    assert np.abs(model(x) - base(x)).max() > 1e-5  # the cap acts: another model
    with pytest.raises(ModelError, match="softcap_llama.SoftCappedLlama subclasses Llama"):
        save_hf(model, tmp_path / "out")
