"""GRPO's rollouts and learning step on one layout: ``python -m tests.sharding.rollout_parity
OUT.json STRATEGY [OVERRIDES...]`` (devices from XLA_FLAGS; a process of a multi-process
group when THESEUS_NUM_PROCESSES is set).

A tiny GPT's GRPO setup (``gpt/train/grpo``'s recipe through ``TrainSetup``) on the layout
the overrides give: the compiled sampler draws 16 rows of 12 tokens (4 prompts x 4
completions, one seed per row) from the seeded initial weights, each process handing it its
own rows; the rewards (one per row, from its tokens) become group advantages; the rows go
through two training steps. Process 0 writes every row's tokens and log-probabilities and
both steps' losses and gradient norms to OUT.json, for ``test_rollout_parity`` to compare across layouts.
"""

from __future__ import annotations

import json
import sys

GENERATIONS, PROMPTS, NEW = 4, 4, 12
BASE = [
    "model.n_layers=2",
    "model.d_model=64",
    "model.n_heads=4",
    "model.max_seq_len=64",
    "training.seq_len=32",
    f"training.global_batch_size={GENERATIONS * PROMPTS}",
    f"grpo.generations={GENERATIONS}",
    f"grpo.max_new_tokens={NEW}",
    "optimizer.learning_rate=0.01",
    "schedule.name=constant",
]
VOCAB = 50


def main(out: str, overrides: list[str]) -> None:
    from theseus.core.sharding.distributed import initialize_from_env

    initialize_from_env()
    import jax
    import numpy as np
    from theseus.core.plugins import registries
    from theseus.core.recipes.grpo import GRPOJob
    from theseus.core.recipes.grpo_loss import group_advantages
    from theseus.core.recipes.grpo_rows import rollout_rows
    from theseus.core.recipes.grpo_run import gather_rows, make_sampler
    from theseus.core.runner import config_for, job_spec
    from theseus.core.sampler import SamplerRequest
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    tree = config_for(job_spec("gpt/train/grpo", regs), regs, [*BASE, *overrides])
    config = tree.to_object(GRPOJob.config_type)
    setup = TrainSetup.build(config, regs, VOCAB, GRPOJob.recipe(config))
    rows = config.training.global_batch_size
    local = rows // jax.process_count()
    first = jax.process_index() * local
    prompts = [[1 + (p * 7 + i) % (VOCAB - 1) for i in range(3 + p)] for p in range(PROMPTS)]
    all_prompts = [prompt for prompt in prompts for _ in range(GENERATIONS)]
    seeds = [1000 + row for row in range(rows)]
    request = SamplerRequest(
        rows=rows,
        prompt_width=max(len(p) for p in prompts),
        max_new_tokens=NEW,
        stop_tokens=(),
        pad_id=0,
        temperature=1.0,
    )
    sampler = make_sampler(setup, request)
    state = setup.init_state()
    mine = slice(first, first + local)
    completions, logps = sampler(setup.full_params(state), all_prompts[mine], seeds[mine])
    rewards = gather_rows(np.asarray([float(sum(c) % 3) for c in completions], np.float32))
    advantages = np.asarray(group_advantages(rewards, GENERATIONS, "group", 1e-4), np.float32)
    batch = rollout_rows(all_prompts[mine], completions, advantages[mine], 32, logps)
    losses, norms = [], []
    for _ in range(2):
        state, metrics = setup.train_step(state, setup.layout.place_batch(batch))
        losses.append(float(metrics["loss"]))
        norms.append(float(metrics["grad_norm"]))
    tokens = gather_rows(np.asarray(completions, np.int32))
    row_logps = gather_rows(np.asarray(logps, np.float32))
    if jax.process_index() == 0:
        report = {
            "devices": jax.device_count(),
            "processes": jax.process_count(),
            "mesh": dict(setup.layout.sizes),
            "tokens": tokens.tolist(),
            "logps": row_logps.tolist(),
            "losses": losses,
            "grad_norms": norms,
        }
        with open(out, "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
