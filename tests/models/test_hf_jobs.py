"""The Hugging Face jobs end to end: train a tiny GPT and a tiny Llama, ``hf/export`` each,
load the folder in transformers (same logits, same greedy tokens, same tokenizer ids),
``hf/import`` it back and sample the same tokens from both runs; ``init.hf`` fills
``model.*`` from config.json; refusals are one line.

The runs are made once for the module (4 steps each, one shared tokenized dataset). The jobs
run in this process (``theseus.core.runner.run``); the refusals go through the real CLI for
their exit code and their one line.

Tolerance: exported weights are the run's float32 arrays bit for bit, so transformers
computes the same function in float32 with another summation order (torch vs XLA). Each
logit is a chain of dot products over at most 256 terms through 2 blocks; float32's unit
roundoff is 6e-8, so reordering moves a logit by about n * u * sum|terms| ~ 1e-6 at these
magnitudes (|logit| about 1 after 4 steps). ``LOGIT_TOL`` = 1e-4 leaves two orders of
magnitude while still catching any real mismatch (a wrong norm epsilon, a swapped bias or a
transposed kernel moves logits by more than 1e-3). The measured maxima are printed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from theseus.core.data.api import find_dataset

from tests.models.conftest import needs_parity
from tests.train.conftest import TINY, final_params, run_cli

LOGIT_TOL = 1e-4
STEPS = 4
FAMILIES = {"gpt": [], "llama": ["model.d_ff=128"]}  # Llama: 2 kv heads (its default)
PROMPTS = ["def main(args):", "import os"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A root with, per family F: run F (trained), its export exports/F, run F-imported."""
    from theseus.core.runner import run

    root = tmp_path_factory.mktemp("hf-jobs-root")
    exports = tmp_path_factory.mktemp("hf-exports")
    for family, extra in FAMILIES.items():
        overrides = [*TINY, *extra, f"training.total_steps={STEPS}", "eval.every=0"]
        run(f"{family}/train/pretrain", overrides, root=root, name=family)
        written = run(
            "hf/export", [f"hf.run={family}", f"hf.dir={exports / family}"], root=root,
            name=f"{family}-export",
        )  # fmt: skip
        assert written == {"run": family, "step": STEPS, "dir": str(exports / family)}
        run("hf/import", [f"hf.dir={exports / family}"], root=root, name=f"{family}-imported")
    return root, exports


def generated(root, family: str, run_name: str) -> list[list[int]]:
    from theseus.core.runner import run

    name = f"gen-{run_name.replace('@', '-at-')}"
    run(
        f"{family}/generate",
        [f"generate.run={run_name}", f"generate.prompts={PROMPTS}", "generate.max_new_tokens=8"],
        root=root,
        name=name,
    )
    lines = (root / "runs" / name / "generations.jsonl").read_text().splitlines()
    return [json.loads(line)["ids"] for line in lines]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_export_is_a_hugging_face_folder(made, family):
    root, exports = made
    folder = exports / family
    assert {p.name for p in folder.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == 384 and config["eos_token_id"] == 0  # <|endoftext|>
    tokenizer = find_dataset(root, "python-stdlib") / "tokenizer" / "tokenizer.json"
    assert (folder / "tokenizer.json").read_bytes() == tokenizer.read_bytes()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_import_is_a_pretrain_run_at_step_zero_with_the_same_weights(made, family):
    root, exports = made
    imported = root / "runs" / f"{family}-imported"
    record = json.loads((imported / "job.json").read_text())
    assert record["key"] == f"{family}/train/pretrain" and record["status"] == "finished"
    assert record["imported_from"] == str(exports / family)
    assert sorted(p.name for p in (imported / "checkpoints").iterdir()) == ["0"]
    assert (imported / "tokenizer" / "tokenizer.json").is_file()
    assert (imported / "hf" / "config.json").is_file()
    before, after = final_params(root, family), final_params(root, f"{family}-imported")
    assert before.keys() == after.keys()
    for key in before:
        assert np.array_equal(before[key], after[key]), key  # bit for bit, both ways

    # its config is a complete pretrain config: the model of config.json, the run's tokenizer
    import yaml

    config = yaml.safe_load((imported / "config.yaml").read_text())
    trained = yaml.safe_load((root / "runs" / family / "config.yaml").read_text())
    assert config["model"]["vocab_size"] == 384
    for key in ("n_layers", "d_model", "n_heads", "max_seq_len", "norm_eps"):
        assert config["model"][key] == trained["model"][key], key
    assert config["data"]["tokenizer"] == "hf"
    assert config["data"]["tokenizer_options"]["path"] == str(
        imported / "tokenizer" / "tokenizer.json"
    )
    assert config["data"]["suffix"] == f"{family}-imported"
    tokenized = (root / "data" / "python-stdlib").glob(f"*-{family}-imported")
    assert not list(tokenized)  # nothing tokenized


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_imported_run_samples_the_same_tokens(made, family):
    root, _ = made
    original = generated(root, family, family)
    again = generated(root, family, f"{family}-imported")
    assert original == again
    assert all(len(ids) > 0 for ids in original)
    at_step = generated(root, family, f"{family}@{STEPS}")  # RUN@STEP names the same checkpoint
    assert at_step == original


def test_init_hf_fills_the_model_config_from_config_json(made):
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec

    _, exports = made
    regs = registries()
    tree = config_for(
        job_spec("llama/train/pretrain", regs), regs, [f"init.hf={exports / 'llama'}"]
    )
    hf = json.loads((exports / "llama" / "config.json").read_text())
    model = tree.to_container()["model"]
    assert model["d_ff"] == hf["intermediate_size"] == 128
    assert model["n_kv_heads"] == hf["num_key_value_heads"] == 2
    assert model["d_model"] == 64 and model["n_heads"] == 2 and model["max_seq_len"] == 64
    assert model["vocab_size"] == 384 and model["rope_theta"] == hf["rope_theta"]
    # an explicit value that agrees is fine; a model choice (dtype) is not config.json's
    config_for(
        job_spec("llama/train/pretrain", regs), regs,
        [f"init.hf={exports / 'llama'}", "model.d_ff=128", "model.dtype=bfloat16"],
    )  # fmt: skip


def test_an_init_hf_contradiction_is_one_line_before_any_tokenization(made, tmp_path):
    _, exports = made
    fresh = tmp_path / "fresh-root"
    result = run_cli(
        fresh, "run", "llama/train/pretrain", f"init.hf={exports / 'llama'}",
        "model.rope_theta=500000", "--name", "contradiction",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "model.rope_theta=500000.0 contradicts rope_theta=10000.0" in lines[0]
    assert str(exports / "llama" / "config.json") in lines[0]
    assert not (fresh / "data").exists() and not (fresh / "runs" / "contradiction").exists()


def test_an_unknown_architecture_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "mamba"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba"})
    )
    root = tmp_path / "root"
    result = run_cli(root, "run", "hf/import", f"hf.dir={folder}", "--name", "mamba")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "architectures=['MambaForCausalLM'], model_type='mamba'" in lines[0]
    for known in ("GPT2LMHeadModel (gpt2)", "LlamaForCausalLM (llama)", "Qwen3MoeForCausalLM"):
        assert known in lines[0]
    assert not (root / "runs" / "mamba").exists()  # refused before the run folder is made


MEASURED: dict[str, tuple[float, float]] = {}


@pytest.mark.parity
@needs_parity
@pytest.mark.parametrize("family", list(FAMILIES))
def test_transformers_loads_the_export_with_the_same_logits_and_tokens(made, family):
    import torch
    import transformers
    from theseus.core.plugins import registries
    from theseus.core.train.opening import open_run
    from theseus.models.generate import generate

    root, exports = made
    folder = exports / family
    opened = open_run(root, family, registries=registries(), what="test")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokens = np.random.RandomState(0).randint(0, 384, (3, 24))
    with torch.no_grad():
        theirs = hf_model(torch.tensor(tokens)).logits.numpy()
    ours = np.asarray(opened.model(tokens))
    diff = float(np.max(np.abs(ours - theirs)))
    MEASURED[family] = (diff, float(np.max(np.abs(ours))))
    print(f"{family}: max |logit| {MEASURED[family][1]:.3g}, max difference {diff:.3g}")
    assert diff < LOGIT_TOL

    # the tokenizer: AutoTokenizer encodes as the run's tokenizer does
    auto = transformers.AutoTokenizer.from_pretrained(folder)
    from tokenizers import Tokenizer

    run_tokenizer = Tokenizer.from_file(str(opened.tokenizer_dir / "tokenizer.json"))
    prompt = PROMPTS[0]
    ids = run_tokenizer.encode(prompt).ids
    assert auto.encode(prompt, add_special_tokens=False) == ids
    assert auto.eos_token == "<|endoftext|>"

    # greedy decoding: transformers on the export == theseus on the run (both stop at eos)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    eos = [auto.eos_token_id]
    assert (
        out[0, len(ids) :].tolist()
        == generate(opened.model, [ids], max_new_tokens=8, stop_tokens=eos)[0]
    )


def test_a_model_without_a_kv_cache_generates_the_same_tokens():
    """What ``<model>/generate`` does for a third-party model with only core's protocol."""
    from flax import nnx
    from theseus.models.generate import generate

    from tests.models.conftest import tiny

    class NoCache(nnx.Module):  # a LanguageModel without init_cache/decode
        def __init__(self, inner):
            self.inner, self.config = inner, inner.config

        def __call__(self, tokens, *, positions=None, segment_ids=None):
            return self.inner(tokens, positions=positions, segment_ids=segment_ids)

    model = tiny("llama")
    prompts = [[5, 6, 7], [8, 9]]
    expected = generate(model, prompts, max_new_tokens=6, stop_tokens=[3])
    assert generate(NoCache(model), prompts, max_new_tokens=6, stop_tokens=[3]) == expected
