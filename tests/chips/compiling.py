"""Helpers of the target tests: a training setup over a target's compile-only devices, and
its train step, eval step and KV-cache decoding step lowered and compiled for that chip."""

from __future__ import annotations

import os
from typing import Any

import pytest

# a machine without TPUs: no metadata server, one local host (libtpu's defaults otherwise
# print warnings); set before libtpu loads
from theseus.core.chips.environment import installed, quiet_libtpu
from theseus.core.train.job_layout import job_layout

quiet_libtpu()

VOCAB = 256


def aot_installed() -> bool:
    return installed("libtpu") and installed("jax_cuda12_plugin") and installed("nvidia.cudnn")


def require_aot() -> None:
    """Skip without the aot group; in CI (``THESEUS_REQUIRE_AOT=1``) fail instead."""
    if aot_installed():
        return
    message = (
        "the aot dependency group is not installed (uv sync --all-packages --inexact --group aot)"
    )
    if os.environ.get("THESEUS_REQUIRE_AOT") == "1":
        pytest.fail(message)
    pytest.skip(message)


def families() -> list[str]:
    """Every registered model family (families added later join the matrix by themselves)."""
    from theseus.core.plugins import registries

    return sorted(registries().models.names())


def tiny(
    family: str, *extra: str, seq_len: int = 128, batch: int = 8, vocab: int = VOCAB
) -> list[str]:
    return [
        "model.preset=tiny",
        f"model.max_seq_len={max(seq_len, 128)}",
        f"model.vocab_size={vocab}",
        f"training.seq_len={seq_len}",
        f"training.global_batch_size={batch}",
        *extra,
    ]


def target_setup(family: str, target: str, overrides: list[str]) -> Any:
    """``<family>/train/pretrain``'s setup on the target's devices."""
    from theseus.core.chips.devices import compile_only_devices
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    tree = config_for(job_spec(f"{family}/train/pretrain", regs), regs, overrides)
    config = tree.to_object(TrainJobConfig)
    vocab = config.model.vocab_size or VOCAB
    layout = job_layout(config, compile_only_devices(target))
    return TrainSetup.build(config, regs, vocab, layout=layout)


def compile_for_target(lowered: Any) -> Any:
    """Compile for compile-only devices, outside the persistent cache (see
    ``without_disk_cache``)."""
    from theseus.core.chips.devices import without_disk_cache

    with without_disk_cache():
        return lowered.compile()


def compile_train(setup: Any) -> Any:
    return compile_for_target(setup.train_step.lower(setup.abstract_state, setup.abstract_batch()))


def compile_eval(setup: Any) -> Any:
    state = setup.abstract_state
    return compile_for_target(
        setup.eval_step.lower(state.params, state.frozen, setup.abstract_batch())
    )


def compile_decode(setup: Any, prompt_width: int = 16, new_tokens: int = 112) -> Any:
    """The rollout sampler's whole decoding loop (prefill, then the loop over new tokens) of
    the setup's model over its mesh: rows split over the batch axes, the cache with them,
    the parameters where the trainer keeps them."""
    from theseus.core.recipes.grpo_run import make_sampler
    from theseus.core.sampler import SamplerRequest

    request = SamplerRequest(
        rows=setup.config.training.global_batch_size,
        prompt_width=prompt_width,
        max_new_tokens=new_tokens,
        stop_tokens=(1,),
        pad_id=0,
        temperature=1.0,
    )
    sampler = make_sampler(setup, request)
    return compile_for_target(sampler.lower(setup.full_params(setup.abstract_state)))
