"""LoRA: adapters on a frozen base, trained alone, checkpointed alone, resumed bit-exactly."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from theseus.core.inspect import open_step

from tests.train.conftest import TINY, resumed_after_kill, run_cli, train_losses

ARGS = ["run", "llama/train/pretrain", *TINY, "eval.every=0", "checkpoint.every=2"]
LORA = ["lora.rank=4", "lora.alpha=8", "lora.dropout=0.1"]


def flat(tree) -> dict[str, np.ndarray]:
    from theseus.core.train.digest import path_name

    return {path_name(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.fixture(scope="module")
def base_run(shared_root):
    done = run_cli(shared_root, *ARGS, "training.total_steps=2", "--name", "lora-base")
    assert done.returncode == 0, done.stderr[-3000:]
    return "lora-base"


def test_an_adapted_model_starts_as_its_base_and_merging_keeps_its_outputs():
    from theseus.core.plugins import registries
    from theseus.core.train.configs import LoRAConfig

    regs = registries()
    component = regs.models.get("llama")
    config = component.config(
        vocab_size=64, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=16
    )
    base_class = component.load()
    lora = LoRAConfig(rank=4, alpha=8.0)
    adapted_class = regs.hook.theseus_adapt_model(model_class=base_class, lora=lora)
    tokens = jnp.arange(24).reshape(2, 12) % 64
    base = base_class(config, rngs=nnx.Rngs(params=0))
    adapted = adapted_class(config, rngs=nnx.Rngs(params=0))
    # B starts at zero: exactly the base, to the bit
    np.testing.assert_array_equal(np.asarray(adapted(tokens)), np.asarray(base(tokens)))
    # give the adapters weight, then fold them into the kernels: the same function
    graphdef, params, rest = nnx.split(adapted, nnx.Param, ...)
    params = jax.tree.map(lambda x: x + 0.05 * jnp.cos(jnp.arange(x.size).reshape(x.shape)), params)
    adapted = nnx.merge(graphdef, params, rest)
    before = np.asarray(adapted(tokens))
    assert np.abs(before - np.asarray(base(tokens))).max() > 1e-3  # the adapters do something
    adapted.merge_adapters()
    after = np.asarray(adapted(tokens))
    # one matmul's reassociation in float32 over D=32..64 terms: ~1e-6 relative to |logits|
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * max(1.0, np.abs(before).max()))


def test_only_adapters_train_and_checkpoints_hold_them_alone(shared_root, base_run):
    """Trained in process: the frozen base is bitwise the base run's weights after training,
    the optimizer state covers the adapters only, and the checkpoint holds no base weight."""
    from theseus.core.jobs import JobContext
    from theseus.core.plugins import registries
    from theseus.core.rundir import RunDir
    from theseus.core.runner import prepare
    from theseus.core.train.opening import open_run
    from theseus.core.train.setup import TrainSetup, open_data
    from theseus.core.train.trainer import Trainer

    overrides = [*TINY, "eval.every=0", "checkpoint.every=2", "training.total_steps=4", *LORA]
    prepared = prepare(
        "llama/train/pretrain",
        [*overrides, f"init.checkpoint={base_run}"],
        root=shared_root,
        name="lora-inproc",
        fresh=True,
    )
    config = prepared.typed_config()
    run = RunDir(shared_root, "lora-inproc")
    run.create("llama/train/pretrain", prepared.tree.to_yaml(), None)
    regs = registries()
    data = open_data(config, str(shared_root), "packed", run=run)
    setup = TrainSetup.build(config, regs, data.vocab_size)
    trainer = Trainer(setup, data, JobContext(root=str(shared_root), run=run, registries=regs))
    summary = trainer.fit()
    assert summary["step"] == 4
    state = trainer.final_state
    base = open_run(str(shared_root), base_run, registries=regs).plain_params()
    frozen, expected = flat(state.frozen), flat(base)
    assert frozen.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(frozen[key], expected[key], err_msg=key)
    adapters = flat(state.params)
    assert adapters and all(k.split(".")[-2] in ("lora_a", "lora_b") for k in adapters)
    assert any(np.abs(v).max() > 0 for k, v in adapters.items() if "lora_b" in k)  # trained
    adapter_size = sum(v.size for v in adapters.values())
    opt_size = sum(int(x.size) for x in jax.tree.leaves(state.opt_state))
    assert 2 * adapter_size <= opt_size <= 2 * adapter_size + 16  # AdamW mu, nu (+ counts)
    meta = json.loads((run.checkpoint_dir / "4" / "meta" / "metadata").read_text())
    saved = [k for k in meta["arrays"] if k.startswith("state.params.")]
    assert saved and all(("lora_a" in k) or ("lora_b" in k) for k in saved)
    assert not [k for k in meta["arrays"] if k.startswith("state.frozen")]


def test_a_killed_lora_run_with_dropout_resumes_bit_exactly(shared_root, base_run):
    args = [*ARGS, "training.total_steps=6", *LORA, f"init.checkpoint={base_run}"]
    args.append("checkpoint.asynchronous=false")  # step 2's checkpoint is whole before row 2
    whole = run_cli(shared_root, *args, "--name", "lora-whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    resumed = resumed_after_kill(shared_root, "lora-killed", args, steps=3)
    assert "resumed lora-killed from step" in resumed
    assert train_losses(shared_root, "lora-killed") == train_losses(shared_root, "lora-whole")
    # time travel replays a step of the adapters over the frozen base, its dropout included
    replayed = open_step(shared_root, "lora-whole", 4).replay()
    assert replayed["loss"] == train_losses(shared_root, "lora-whole")[4]


@pytest.mark.parametrize("preset", ["tiny", "1b"])
def test_trainable_fraction_at_rank_8_is_the_adapters_formula(preset, capsys):
    """Counted on abstract shapes (nothing allocated): every targeted projection in x out
    gets r * (in + out) parameters."""
    from theseus.core.adapters import Adapter
    from theseus.core.plugins import registries
    from theseus.core.train.configs import LoRAConfig

    regs = registries()
    component = regs.models.get("llama")
    values = component.extra["presets"][preset]
    config = component.config(preset=preset, **{"vocab_size": 32000, **values})
    lora = LoRAConfig(rank=8)
    adapted_class = regs.hook.theseus_adapt_model(model_class=component.load(), lora=lora)
    model = nnx.eval_shape(lambda: adapted_class(config, rngs=nnx.Rngs(params=0)))
    _, adapters, others, _ = nnx.split(model, Adapter, nnx.Param, ...)
    trained = sum(math.prod(x.shape) for x in jax.tree.leaves(adapters))
    total = trained + sum(math.prod(x.shape) for x in jax.tree.leaves(others))
    d, layers = config.d_model, config.n_layers
    head_dim = config.head_dim or d // config.n_heads
    q, kv = config.n_heads * head_dim, (config.n_kv_heads or config.n_heads) * head_dim
    per_layer = (d + q) + 2 * (d + kv) + (q + d) + 2 * (d + config.d_ff) + (config.d_ff + d)
    assert trained == layers * 8 * per_layer
    with capsys.disabled():
        print(
            f"\nllama {preset}: LoRA rank 8 trains {trained:,} of {total:,} ({trained / total:.3%})"
        )


def test_an_unknown_target_is_one_line(shared_root, base_run):
    done = run_cli(
        shared_root, *ARGS, "lora.rank=4", "lora.targets=[qq_proj]", f"init.checkpoint={base_run}",
        "--name", "lora-bad",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: lora.targets: 'qq_proj' names no linear layer of ")
    assert "q_proj" in line and "mlp" in line


def test_a_bfloat16_base_halves_the_frozen_bytes_and_adapters_stay_float32(shared_root, base_run):
    from theseus.core.plugins import registries
    from theseus.core.runner import prepare
    from theseus.core.train.setup import TrainSetup

    def setup(*extra: str) -> TrainSetup:
        overrides = [*TINY, "lora.rank=4", *extra]
        config = prepare(
            "llama/train/pretrain", overrides, root=shared_root, name="lora-dtype"
        ).typed_config()
        return TrainSetup.build(config, registries(), 384)

    wide, narrow = setup(), setup("lora.base_dtype=bfloat16")

    def nbytes(tree) -> int:
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))

    assert nbytes(narrow.abstract_state.frozen) * 2 == nbytes(wide.abstract_state.frozen)
    assert {str(x.dtype) for x in jax.tree.leaves(narrow.abstract_state.frozen)} == {"bfloat16"}
    assert {str(x.dtype) for x in jax.tree.leaves(narrow.abstract_state.params)} == {"float32"}
    args = [*ARGS, "training.total_steps=2", *LORA, "lora.base_dtype=bfloat16"]
    done = run_cli(shared_root, *args, f"init.checkpoint={base_run}", "--name", "lora-bf16")
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(math.isfinite(v) for v in train_losses(shared_root, "lora-bf16").values())
