"""``sharding.remat=auto`` is measured on the job's own step, not on pretraining's.

A DPO run on one v5e (compile-only devices, the aot group): a 12 x 1024 Llama with a
128,000-token vocabulary, one pair of 2,048 tokens, every weight trained beside the frozen
reference copy. Measured as pretraining measures its step (the cross entropy, its head
taken a few positions at a time, no reference), keeping everything fits: 10.5 GiB of the
15.0 GiB budget. The DPO step also
keeps both sequences' whole float32 logits for its backward pass: at ``none`` it needs 15.7
GiB, so its own measurement recomputes the MLPs (14.7 GiB). Choosing by the cross entropy
would have planned a step that does not fit.
"""

from __future__ import annotations

import pytest

from tests.chips.compiling import require_aot


@pytest.fixture(autouse=True)
def _aot() -> None:
    require_aot()


def test_remat_auto_is_measured_on_the_dpo_step_itself():
    from theseus.core.chips.devices import compile_only_devices
    from theseus.core.plugins import registries
    from theseus.core.recipes.dpo import DPOJob
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.job_layout import job_layout
    from theseus.core.train.recipe import PRETRAIN
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    overrides = ["model.n_layers=12", "model.d_model=1024", "model.n_heads=16"]
    overrides += ["model.n_kv_heads=16", "model.d_ff=4096", "model.vocab_size=128000"]
    overrides += ["model.max_seq_len=2048", "training.seq_len=2048"]
    overrides += ["training.global_batch_size=2"]
    tree = config_for(job_spec("llama/train/dpo", regs), regs, overrides)
    config = tree.to_object(DPOJob.config_type)
    layout = job_layout(config, compile_only_devices("v5e-1"))
    setup = TrainSetup.build(config, regs, 128000, DPOJob.recipe(config), layout=layout)
    assert setup.remat.level == "mlp", setup.remat
    assert setup.remat.reason.startswith("the most kept that fits: none"), setup.remat.reason
    # the same shape measured as pretraining (its step, its state: no reference copy)
    by_cross_entropy = TrainSetup.build(config, regs, 128000, PRETRAIN, layout=layout)
    assert by_cross_entropy.remat.level == "none", by_cross_entropy.remat


def grpo_setup(per_device: int):
    from theseus.core.chips.devices import compile_only_devices
    from theseus.core.plugins import registries
    from theseus.core.recipes.grpo import GRPOJob
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.job_layout import job_layout
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    overrides = ["model.n_layers=12", "model.d_model=768", "model.n_heads=12"]
    overrides += ["model.n_kv_heads=12", "model.vocab_size=262", "model.max_seq_len=2048"]
    overrides += ["grpo.max_new_tokens=512", "training.seq_len=552", "grpo.generations=8"]
    overrides += ["training.global_batch_size=128"]
    overrides += [f"training.per_device_batch_size={per_device}"]
    tree = config_for(job_spec("llama/train/grpo", regs), regs, overrides)
    config = tree.to_object(GRPOJob.config_type)
    layout = job_layout(config, compile_only_devices("v5e-1"))
    return TrainSetup.build(config, regs, 262, GRPOJob.recipe(config), layout=layout)


def test_remat_auto_is_measured_on_one_micro_step():
    """A GRPO step of 128 rows x 552 tokens (a 12 x 768 Llama) on one v5e: all at once,
    keeping everything would need 26.9 GiB, so it recomputes every block (XLA:TPU's compile:
    6.3 GiB at ``full``); in 8 micro-steps of 16 rows a backward pass holds an eighth of it,
    and keeping everything fits (compiled: 3.7 GiB). Measured on the whole batch, the
    micro-stepped run recomputed every block it had room to keep (on the chip its learning
    step took 0.48 s to Tunix's 0.38)."""
    whole, micro = grpo_setup(128), grpo_setup(16)
    assert whole.remat.level == "full", whole.remat
    assert micro.remat.level == "none", micro.remat
