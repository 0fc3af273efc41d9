"""The ``grpo`` config group: rollouts, rewards and the clipped objective (cheap to import:
no JAX). The formulas live in :mod:`theseus.core.recipes.grpo_loss`; ``docs/grpo.md``
explains each option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.errors import ConfigError
from theseus.core.ranges import check_config

ADVANTAGES = ("group", "rloo")
TASKS = ("addition", "jsonl")
AGGREGATIONS = ("token_mean", "sequence_mean", "dr_grpo")


@dataclass
class GRPOConfig:
    generations: int = option(4, "G: completions sampled per prompt each step (G > 1)", ge=2)
    max_new_tokens: int = option(16, "longest completion, in tokens (Dr. GRPO's constant)", ge=1)
    sample_rows: int = option(
        0,
        "rows decoded at once (a divisor of the batch); 0: as many as fit beside the "
        "trainer's state (the plan says how many)",
        ge=0,
    )
    stop_at_end: bool = option(
        True,
        "a completion ends at the end-of-turn or end-of-document token; false: every "
        "rollout runs max_new_tokens (a benchmark's worst case)",
    )
    temperature: float = option(1.0, "sampling temperature of the rollouts", gt=0)
    top_k: int = option(0, "keep the k most likely tokens when sampling (0: all)", ge=0)
    top_p: float = option(1.0, "nucleus sampling: the smallest set with this mass", gt=0, le=1)
    advantage: str = option(
        "group",
        "group: (r - mean_G)/(std_G + scale_eps); rloo: r - mean of the other G - 1",
        choices=ADVANTAGES,
    )
    scale_eps: float = option(1e-4, "added to the group's std before dividing (group only)", gt=0)
    epsilon: float = option(0.2, "ε_low: the ratio is clipped below at 1 - ε", ge=0, lt=1)
    epsilon_high: float = option(0.2, "ε_high: the ratio is clipped above at 1 + ε_high", ge=0)
    iterations: int = option(
        1, "μ: optimizer steps on each batch of rollouts (old log-probs from its first)", ge=1
    )
    tis_cap: float = option(
        0.0,
        "truncated importance sampling: weight each token by min(π_old/π_sampler, cap); 0 off",
        ge=0,
    )
    beta: float = option(0.0, "β: weight of the k3 KL to the frozen reference (0: none)", ge=0)
    loss: str = option(
        "token_mean",
        "token_mean (all tokens of the batch), sequence_mean (per completion, then mean) "
        "or dr_grpo (sum over B x max_new_tokens)",
        choices=AGGREGATIONS,
    )
    rewards: list[str] = option(
        help="reward functions by name (theseus_register_rewards)",
        factory=lambda: ["addition_exact", "addition_format"],
    )
    reward_weights: list[float] = option(
        help="one weight per reward (empty: every weight 1)", factory=list, finite=True
    )
    task: str = option(
        "addition", "addition (embedded, from the seed) or jsonl (grpo.prompts_file)", choices=TASKS
    )
    prompts_file: str = option("", "jsonl task: a file of one JSON object per line")
    prompt_field: str = option("prompt", "jsonl task: the field holding the question")
    answer_field: str = option("answer", "jsonl task: the field holding the reference answer")
    max_digits: int = option(2, "addition task: operands have 1 to this many digits", ge=1, le=9)
    problems: int = option(1000, "addition task: training problems drawn from the seed", ge=1)
    shuffle_rewards: bool = option(
        False, "a control: permute the rewards across the batch's completions (learns nothing)"
    )
    eval_prompts: int = option(
        64,
        "held-out prompts (and as many training ones) answered greedily every eval.every steps",
        ge=1,
        resume_safe=True,
    )

    def __post_init__(self) -> None:
        check_config(self, "grpo")  # ranges and choices
        if self.task == "jsonl" and not self.prompts_file:
            raise ConfigError("grpo.task=jsonl reads grpo.prompts_file: name the file")
        if not self.rewards:
            raise ConfigError("grpo.rewards is empty: name at least one reward function")
        if self.reward_weights and len(self.reward_weights) != len(self.rewards):
            raise ConfigError(
                f"grpo.reward_weights has {len(self.reward_weights)} entries for "
                f"{len(self.rewards)} rewards: give one weight per reward, or none"
            )
        if not all(math.isfinite(w) for w in self.reward_weights):
            raise ConfigError(f"grpo.reward_weights={self.reward_weights}: expected finite numbers")

    def weights(self) -> list[float]:
        return list(self.reward_weights) or [1.0] * len(self.rewards)
