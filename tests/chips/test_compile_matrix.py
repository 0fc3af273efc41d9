"""The train step, the eval step and KV-cache decoding compile for the chips users train on.

Compiled by the real XLA:TPU and XLA:GPU compilers on compile-only devices (the aot group);
numerics are not checked here (no chip): ``test_splash_per_shard`` checks the per-shard
kernel against the reference in the Pallas interpreter.

The full matrix (families x 4 strategies x 3 attention choices x 3 programs on v5p-8, and
again on h100x8) is ~250 compiles at 6-30 s of CPU each: far over the suite's budget. This
is a covering subset, each axis at least once:

* v5p-8, every registered family (families added later join by themselves), fsdp+tp
  (tensor=2: the strategy that shards the most: parameters, heads and rows), attention
  auto (which is splash on a TPU): train, eval and decode steps.
* v5p-8, llama, splash under dp and zero1 (fsdp is the issue's reproduction in
  ``test_splash_per_shard``; fsdp+tp above): train step.
* v5p-8, llama, flash under fsdp+tp: train step.
* h100x8, llama, cuDNN (auto, bf16) under fsdp and fsdp+tp: train step; eval and decode
  under fsdp+tp.
"""

from __future__ import annotations

import pytest

from tests.chips.compiling import (
    compile_decode,
    compile_eval,
    compile_train,
    families,
    require_aot,
    target_setup,
    tiny,
)

FSDP_TP = ["sharding.strategy=fsdp+tp", "sharding.tensor=2"]
SPLASH = "splash_mha_fwd"  # the TPU kernel's custom call, forward (and dq, dkv backward)
CUDNN = "__cudnn$fmha"
DECODE = "decode_attention"  # the decoding kernel's custom call (layers/decode_attention.py)


@pytest.fixture(autouse=True)
def _aot() -> None:
    require_aot()


def is_mixture(family: str) -> bool:
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig

    regs = registries()
    tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, ["model.preset=tiny"])
    return bool(getattr(tree.to_object(TrainJobConfig).model, "n_experts", 0))


@pytest.mark.parametrize("family", families())
def test_every_family_compiles_for_v5p_8_under_fsdp_tp(family):
    # a mixture's experts take the devices tensor leaves: dropless on a TPU it asks for the
    # axis (the automatic one stays 1 there), so the dropless exchange compiles too
    mixture = is_mixture(family)
    experts = ["sharding.expert=2"] if mixture else []
    setup = target_setup(family, "v5p-8", tiny(family, *FSDP_TP, *experts))
    fsdp, expert = (1, 2) if mixture else (2, 1)
    sizes = {"data": 1, "fsdp": fsdp, "expert": expert, "context": 1, "tensor": 2}
    assert setup.layout.sizes == sizes
    assert setup.attention == "splash", setup.attention  # auto on a TPU
    assert SPLASH in compile_train(setup).as_text()
    assert SPLASH in compile_eval(setup).as_text()
    decoding = compile_decode(setup).as_text()  # prefill by splash, turns by the kernel
    assert SPLASH in decoding
    # latent attention (DeepSeek-V3) expands its cached latents every turn: the stages
    assert (DECODE in decoding) == (family != "deepseek_v3")


@pytest.mark.parametrize("strategy", ["dp", "zero1"])
def test_llama_splash_compiles_for_v5p_8(strategy):
    overrides = tiny("llama", f"sharding.strategy={strategy}", "model.attention=splash")
    setup = target_setup("llama", "v5p-8", overrides)
    assert setup.layout.sizes["data"] == 4
    assert SPLASH in compile_train(setup).as_text()


def test_llama_flash_compiles_for_v5p_8():
    setup = target_setup("llama", "v5p-8", tiny("llama", *FSDP_TP, "model.attention=flash"))
    assert setup.attention == "flash"
    assert SPLASH not in compile_train(setup).as_text()


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp+tp"])
def test_llama_cudnn_compiles_for_h100x8(strategy):
    extra = FSDP_TP if strategy == "fsdp+tp" else ["sharding.strategy=fsdp"]
    setup = target_setup("llama", "h100x8", tiny("llama", *extra))
    assert setup.attention == "cudnn" and setup.execution.compute_dtype == "bfloat16"
    text = compile_train(setup).as_text()
    assert f'{CUDNN}ScaleBiasSoftmax"' in text and f'{CUDNN}ScaleBiasSoftmaxBackward"' in text
    if strategy == "fsdp+tp":
        assert CUDNN in compile_eval(setup).as_text()
        compile_decode(setup)
