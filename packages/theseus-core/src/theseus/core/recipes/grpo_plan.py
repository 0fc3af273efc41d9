"""What a GRPO dry run adds to the learning step's plan: the rollouts.

The sampler of the run's setup (``theseus_sampler``) is made for the batch's shape: its
rows, prompts as long as ``training.seq_len`` leaves room for (the task's are shorter) and
``grpo.max_new_tokens``. From it: the KV cache each device holds for a pass of rows, the
passes a batch takes, whether the pass fits beside the trainer's state, and the time a
decoding turn takes: the bytes it reads (the weights in their compute dtype, the cache
written so far) at the chip's bandwidth, divided by the fraction of that the decoding loop
was measured to reach on the chip (``chips/measured.json``, ``decode``); a chip it was not
measured on gets the bandwidth bound alone.
"""

from __future__ import annotations

from typing import Any

from theseus.core.chips.measured import section
from theseus.core.chips.specs import chip_of_device_kind
from theseus.core.sampler import SamplerRequest


def rollout_request(config: Any) -> SamplerRequest:
    """The shape of a run's batches of rollouts, as a plan sees it (the longest prompts the
    rows leave room for)."""
    grpo = config.grpo
    return SamplerRequest(
        rows=config.training.global_batch_size,
        prompt_width=max(config.training.seq_len - grpo.max_new_tokens + 1, 1),
        max_new_tokens=grpo.max_new_tokens,
        stop_tokens=(),
        pad_id=0,
        temperature=grpo.temperature,
        rows_per_pass=grpo.sample_rows,
    )


def rollout_plan(setup: Any) -> dict[str, Any]:
    """The ``rollouts`` fields of a GRPO dry run (``Recipe.plan``)."""
    from theseus.core.recipes.grpo_run import make_sampler

    request = rollout_request(setup.config)
    plan = make_sampler(setup, request).plan()
    chip = chip_of_device_kind(setup.layout.device_kind)
    fields: dict[str, Any] = {
        "rows": request.rows,
        "rows_per_pass": plan.rows_per_pass,
        "passes": plan.passes,
        "new_tokens": request.max_new_tokens,
        "cache_slots": plan.cache_slots,
        "reader": plan.reader,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "weight_bytes": plan.weight_bytes,
        "bytes_per_turn": plan.bytes_per_turn,
        "peak_bytes": plan.peak_bytes,
        "budget_bytes": plan.budget_bytes,
        "fits": plan.fits,
    }
    if chip is not None:
        bound = plan.bytes_per_turn / chip.hbm_bandwidth
        fraction = section("decode")["roofline_fraction"].get(setup.layout.device_kind)
        turn = bound / fraction if fraction else bound
        fields.update(
            turn_seconds_bound=bound,
            turn_seconds_estimate=turn,
            roofline_fraction=fraction,
            sample_seconds_estimate=turn * request.max_new_tokens * plan.passes,
        )
    return {"rollouts": fields}
