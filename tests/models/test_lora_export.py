"""LoRA runs leave theseus three ways: ``hf/export hf.peft=true`` (a PEFT adapter folder),
``hf/export hf.merge=true`` (one Hugging Face model, adapters folded in) and ``lora/merge``
(a plain run at step 0); all three compute the LoRA run's logits.

The module makes, once, in this process: a tiny Llama run ``base`` (2 steps), its export
(the Hugging Face base), a LoRA run ``lora`` on that folder (``init.hf``, rank 4, 4 steps at
a learning rate high enough that the adapters move the logits), then each export of it and
the ``lora/merge`` run. GPT-2's fused ``c_attn`` (q, k, v in one tensor) is checked on a
model with random adapters, without runs.

Tolerance: every path computes the same float32 function in another summation order (torch
vs XLA, PEFT's ``(x A^T) B^T`` beside the base vs ``x (W + s A B)`` merged). Each logit is a
chain of dot products of at most 128 terms through 2 blocks; float32's unit roundoff is
6e-8, so reordering moves a logit by about n * u * sum|terms|, ~1e-6 at |logit| ~ 1.
``TOL`` = 2e-5 of the logit scale leaves an order of magnitude over that (the measured
maxima are printed), while a transposed or misplaced adapter, a wrong scale or a dropped
module moves logits by about the adapters' whole effect, which each test asserts is over
100 times ``TOL``.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tests.train.conftest import TINY

HAVE_PEFT = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft"))
needs_peft = pytest.mark.skipif(
    not HAVE_PEFT, reason="torch, transformers and peft (the `parity` group) are not installed"
)

TOL = 2e-5  # of max(1, max |logit|): see the module docstring
STEPS = 4
LORA = ["lora.rank=4", "lora.alpha=8", "lora.dropout=0.1"]
FAST = ["optimizer.learning_rate=0.01", "schedule.warmup_steps=1", "eval.every=0"]


def tolerance(logits: np.ndarray) -> float:
    return TOL * max(1.0, float(np.abs(logits).max()))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A root with runs base, lora (on exports/base), merged; exports base, peft, merged."""
    from theseus.core.runner import run

    root = tmp_path_factory.mktemp("lora-export-root")
    exports = tmp_path_factory.mktemp("lora-exports")
    llama = [*TINY, "model.d_ff=128"]
    run("llama/train/pretrain", [*llama, "training.total_steps=2", *FAST], root=root, name="base")
    run("hf/export", ["hf.run=base", f"hf.dir={exports / 'base'}"], root=root, name="base-hf")
    run(
        "llama/train/pretrain",
        [*TINY, f"training.total_steps={STEPS}", *FAST, *LORA, f"init.hf={exports / 'base'}"],
        root=root,
        name="lora",
    )
    for kind in ("peft", "merge"):
        run(
            "hf/export",
            ["hf.run=lora", f"hf.{kind}=true", f"hf.dir={exports / kind}"],
            root=root,
            name=f"lora-{kind}",
        )
    run("lora/merge", ["merge.run=lora"], root=root, name="merged")
    return root, exports


@pytest.fixture(scope="module")
def lora_logits(made):
    """(tokens, the LoRA run's logits, the base run's logits) on the same tokens."""
    from theseus.core.plugins import registries
    from theseus.core.train.opening import open_run

    root, _ = made
    tokens = np.random.RandomState(0).randint(0, 384, (3, 24))
    ours = np.asarray(open_run(root, "lora", registries=registries(), what="test").model(tokens))
    base = np.asarray(open_run(root, "base", registries=registries(), what="test").model(tokens))
    effect = float(np.abs(ours - base).max())
    print(f"the adapters move the logits by up to {effect:.3g}")
    assert effect > 100 * tolerance(ours), "the adapters barely moved the logits"
    return tokens, ours, base


def check(name: str, theirs: np.ndarray, ours: np.ndarray) -> None:
    diff = float(np.abs(theirs - ours).max())
    print(f"{name}: max |logit| {np.abs(ours).max():.3g}, max difference {diff:.3g}")
    assert diff < tolerance(ours), name


# ---------------------------------------------------------------------------- PEFT


@pytest.mark.parity
@needs_peft
def test_the_peft_folder_loads_onto_the_hf_base_with_the_lora_runs_logits(made, lora_logits):
    import torch
    import transformers
    from peft import PeftModel
    from safetensors.numpy import load_file

    _, exports = made
    tokens, ours, _ = lora_logits
    folder = exports / "peft"
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (4, 8, 0.1)
    assert (config["bias"], config["fan_in_fan_out"]) == ("none", False)
    assert config["base_model_name_or_path"] == str((exports / "base").resolve())  # init.hf
    assert config["target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    assert len(tensors) == 2 * 7 * 2  # layers x modules x (A, B)
    q = "base_model.model.model.layers.1.self_attn.q_proj"
    assert tensors[f"{q}.lora_A.weight"].shape == (4, 64)  # (r, in)
    assert tensors[f"{q}.lora_B.weight"].shape == (64, 4)  # (out, r)
    assert tensors["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"].shape == (4, 128)

    base = transformers.AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    model = PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        check("peft", model(torch.tensor(tokens)).logits.numpy(), ours)
        merged = model.merge_and_unload()
        check("peft merge_and_unload", merged(torch.tensor(tokens)).logits.numpy(), ours)


@pytest.mark.parity
@needs_peft
def test_the_merged_export_loads_in_transformers_with_the_lora_runs_logits(made, lora_logits):
    import torch
    import transformers

    _, exports = made
    tokens, ours, _ = lora_logits
    folder = exports / "merge"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        check("hf.merge export", model(torch.tensor(tokens)).logits.numpy(), ours)


@pytest.mark.parity
@needs_peft
def test_a_base_that_is_no_hf_folder_is_written_beside_the_adapters(made):
    """A LoRA run on init.checkpoint (and a bfloat16 base): the PEFT folder holds base/, the
    frozen base as the run computed with it, and names it; parity as above."""
    import torch
    import transformers
    from peft import PeftModel
    from theseus.core.plugins import registries
    from theseus.core.runner import run
    from theseus.core.train.opening import open_run

    root, exports = made
    overrides = [*TINY, "model.d_ff=128", "training.total_steps=2", *FAST, *LORA]
    overrides += ["init.checkpoint=base", "lora.base_dtype=bfloat16"]
    run("llama/train/pretrain", overrides, root=root, name="lora-bf16")
    folder = exports / "peft-bf16"
    export = ["hf.run=lora-bf16", "hf.peft=true", f"hf.dir={folder}"]
    assert run("hf/export", export, root=root, name="lora-bf16-peft")["base"] == str(
        (folder / "base").resolve()
    )
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((folder / "base").resolve())
    tokens = np.random.RandomState(1).randint(0, 384, (2, 16))
    ours = np.asarray(
        open_run(root, "lora-bf16", registries=registries(), what="test").model(tokens)
    )
    base = transformers.AutoModelForCausalLM.from_pretrained(folder / "base").eval()
    with torch.no_grad():
        plain = base(torch.tensor(tokens)).logits.numpy()
        assert np.abs(plain - ours).max() > 100 * tolerance(ours)
        model = PeftModel.from_pretrained(base, folder).eval()
        check("peft, bfloat16 base written", model(torch.tensor(tokens)).logits.numpy(), ours)


# ---------------------------------------------------------------------------- lora/merge


def test_lora_merge_makes_a_plain_run_with_the_lora_runs_logits(made, lora_logits):
    import yaml
    from theseus.core.plugins import registries
    from theseus.core.train.opening import open_run

    root, _ = made
    tokens, ours, _ = lora_logits
    merged = root / "runs" / "merged"
    record = json.loads((merged / "job.json").read_text())
    assert record["key"] == "llama/train/pretrain" and record["status"] == "finished"
    assert record["merged_from"] == f"lora@{STEPS}"
    config = yaml.safe_load((merged / "config.yaml").read_text())
    assert config["lora"]["rank"] == 0
    assert config["init"] == {"checkpoint": "", "hf": ""}
    assert sorted(p.name for p in (merged / "checkpoints").iterdir()) == ["0"]
    meta = json.loads((merged / "checkpoints" / "0" / "meta" / "metadata").read_text())
    params = [k for k in meta["arrays"] if k.startswith("state.params.")]
    assert params and not [k for k in params if "lora_" in k]  # a plain state
    assert "state.params.blocks.attention.q_proj.kernel.value" in params

    opened = open_run(root, "merged", registries=registries(), what="test")
    assert opened.step == 0 and opened.config.lora.rank == 0
    check("lora/merge run", np.asarray(opened.model(tokens)), ours)


def test_a_lora_checkpoint_is_small(made):
    root, _ = made

    def size(path) -> int:
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

    lora = size(root / "runs" / "lora" / "checkpoints" / str(STEPS))
    base = size(root / "runs" / "base" / "checkpoints" / "2")
    print(f"LoRA checkpoint {lora:,} bytes, base checkpoint {base:,} bytes: {lora / base:.3f}")
    assert lora < base / 3


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("key", "overrides", "words"),
    [
        ("hf/export", ["hf.run=lora"], ["lora.rank=4", "hf.merge=true", "hf.peft=true"]),
        ("hf/export", ["hf.run=base", "hf.peft=true"], ["trained no adapters"]),
        ("hf/export", ["hf.run=lora", "hf.peft=true", "hf.merge=true"], ["choose one"]),
        ("lora/merge", ["merge.run=base"], ["trained no adapters"]),
    ],
)
def test_what_cannot_be_exported_is_refused_in_one_line_before_the_run_folder(
    made, key, overrides, words
):
    from theseus.core.runner import run
    from theseus.models.errors import ModelError

    root, _ = made
    with pytest.raises(ModelError) as error:
        run(key, overrides, root=root, name="refused")
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert not (root / "runs" / "refused").exists()


# ---------------------------------------------------------------------------- layouts


def random_adapted(family: str, targets: list[str]):
    """A tiny adapted model of ``family`` whose adapters are random (B is not zero)."""
    import jax
    from flax import nnx
    from theseus.core.adapters import Adapter
    from theseus.core.plugins import registries
    from theseus.core.train.configs import LoRAConfig

    from tests.models.conftest import tiny

    lora = LoRAConfig(rank=4, alpha=8.0, targets=targets)
    base = tiny(family)
    cls = registries().hook.theseus_adapt_model(model_class=type(base), lora=lora)
    model = cls(base.config, rngs=nnx.Rngs(params=0))
    graphdef, adapters, rest = nnx.split(model, Adapter, ...)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(adapters))))
    adapters = jax.tree.map(lambda x: 0.05 * jax.random.normal(next(keys), x.shape), adapters)
    return nnx.merge(graphdef, adapters, rest), lora


@pytest.mark.parity
@needs_peft
@pytest.mark.parametrize(
    "targets", [["q_proj", "k_proj", "v_proj", "o_proj", "mlp"], ["q_proj", "v_proj"]]
)
def test_gpt2_fused_c_attn_takes_q_k_v_adapters_as_one_block_diagonal_peft_lora(targets, tmp_path):
    """q, k and v share GPT-2's ``c_attn``: their k rank-r adapters become one rank k*r PEFT
    adapter (``rank_pattern``/``alpha_pattern`` keep the scale alpha/r); the merged export
    is checked on the same model."""
    import torch
    import transformers
    from peft import PeftModel
    from theseus.models.hf.checkpoint import save_hf
    from theseus.models.lora_jobs import merged_model
    from theseus.models.peft_export import save_peft

    model, lora = random_adapted("gpt", targets)
    save_hf(model, tmp_path / "base")  # the adapted model's own weights are its base
    save_peft(model, lora, tmp_path / "peft", str(tmp_path / "base"))
    save_hf(merged_model(model), tmp_path / "merged")
    config = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    fused = sum(t in targets for t in ("q_proj", "k_proj", "v_proj"))
    assert config["fan_in_fan_out"] is True  # Conv1D
    assert config["rank_pattern"] == {"c_attn": 4 * fused}
    assert config["alpha_pattern"] == {"c_attn": 8 * fused}

    tokens = np.random.RandomState(0).randint(0, 97, (2, 16))
    ours = np.asarray(model(tokens))
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        plain = base(torch.tensor(tokens)).logits.numpy()
        assert np.abs(plain - ours).max() > 100 * tolerance(ours)
        peft_model = PeftModel.from_pretrained(base, tmp_path / "peft").eval()
        check(
            f"gpt2 peft {','.join(targets)}", peft_model(torch.tensor(tokens)).logits.numpy(), ours
        )
        merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
        check(f"gpt2 merged {','.join(targets)}", merged(torch.tensor(tokens)).logits.numpy(), ours)


def test_a_permuted_output_axis_permutes_lora_b_the_same_way():
    """A family whose rule reorders the output features (as a RoPE permutation would) gets
    lora_B rows in that order: PEFT's ``lora_B @ lora_A`` is the rule applied to ``A @ B``."""
    from theseus.models.hf_mapping import Rule
    from theseus.models.peft_export import placement

    d, heads, head_dim, r = 6, 2, 4, 3
    order = np.array([0, 2, 1, 3])  # within each head, like interleaved <-> halves RoPE

    def to_hf(kernel):  # (d, heads, head_dim) -> torch (heads * head_dim, d), permuted
        return [kernel[:, :, order].reshape(d, -1).T]

    rule = Rule((("q", "kernel"),), ("q.weight",), to_hf, lambda w, s: w)
    place = placement(rule, [(d, heads, head_dim)], 1)
    assert place is not None and not place.fan_in_fan_out
    rng = np.random.RandomState(0)
    a, b = rng.randn(d, r), rng.randn(r, heads, head_dim)
    lora_a = a[place.in_order].T
    lora_b = np.zeros((heads * head_dim, r))
    lora_b[place.rows[0]] = b.reshape(r, -1)[:, place.out_order[0]].T
    (expected,) = to_hf(np.einsum("ir,rhk->ihk", a, b))
    np.testing.assert_allclose(lora_b @ lora_a, expected, rtol=1e-12)
    flat = Rule((("x", "kernel"),), ("x.weight",), lambda k: [k.reshape(-1)], lambda w, s: w)
    assert placement(flat, [(d, 4)], 1) is None  # not one input axis by one output axis
