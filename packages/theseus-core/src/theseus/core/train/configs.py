"""Config schemas of the trainer's groups (cheap to import: no JAX)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from theseus.core.components import option
from theseus.core.data.config import DataConfig
from theseus.core.errors import ConfigError
from theseus.core.model import ModelConfig
from theseus.core.optim.configs import OptimizerBase, ScheduleBase
from theseus.core.ranges import check_config
from theseus.core.sharding.config import ShardingConfig

#: ``training.schedule_on_resume``: what a resume that changes the run's length does to the
#: learning-rate schedule (``theseus.core.resume_schedule``).
SCHEDULE_ON_RESUME = ("refuse", "continue", "stretch")


@dataclass
class TrainingConfig:
    seed: int = option(0, "the one seed; params, data and dropout streams are split from it", ge=0)
    total_steps: int = option(
        100, "optimizer steps to train for (ignored when total_tokens > 0)", resume_safe=True, ge=1
    )
    total_tokens: int = option(
        0, "train for this many tokens instead of total_steps (0: off)", resume_safe=True, ge=0
    )
    seq_len: int = option(128, "tokens per training sequence", ge=1)
    global_batch_size: int = option(16, "sequences per optimizer step, across all devices", ge=1)
    per_device_batch_size: int = option(
        0,
        "sequences per device per micro-step (0: global batch / devices, no accumulation)",
        resume_safe=True,
        ge=0,
    )
    schedule_on_resume: str = option(
        "refuse",
        "when a resume changes the run's length and so the lr of its remaining steps: refuse, "
        "continue (the schedule keeps its old length, then its final lr) or stretch (it spans "
        "the new length)",
        resume_safe=True,
        choices=SCHEDULE_ON_RESUME,
    )
    loss_chunks: int = option(
        0,
        "pieces of the sequence the output head and loss take one at a time, a divisor of "
        "seq_len (0: auto, the fewest that keep one piece's float32 logits under 256 MiB "
        "per device)",
        ge=0,
    )
    skip_nonfinite: bool = option(
        False, "skip steps whose loss is not finite instead of stopping", resume_safe=True
    )
    max_skipped_steps: int = option(
        10,
        "with skip_nonfinite: stop the run once more steps than this were skipped",
        resume_safe=True,
        ge=0,
    )

    def __post_init__(self) -> None:
        if self.loss_chunks > 0 and self.seq_len > 0:
            checked_chunks(self.loss_chunks, self.seq_len)

    def steps(self) -> int:
        """The optimizer steps a run trains for: ``total_steps``, or the steps that reach
        ``total_tokens`` when it is given."""
        if self.total_tokens:
            tokens_per_step = self.global_batch_size * self.seq_len
            return max(1, math.ceil(self.total_tokens / tokens_per_step))
        return self.total_steps


@dataclass
class CheckpointConfig:
    every: int = option(
        50, "save a checkpoint every this many steps (and at the end)", resume_safe=True, ge=0
    )
    keep_last: int = option(3, "keep the last this many checkpoints", resume_safe=True, ge=1)
    keep_every: int = option(
        0,
        "also keep every checkpoint whose step is a multiple of this (0: off)",
        resume_safe=True,
        ge=0,
    )
    asynchronous: bool = option(True, "write checkpoints in the background", resume_safe=True)


WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class WandbConfig:
    """``logging.wandb``: where the Weights & Biases logger sends a run (``logging.loggers``
    must name ``wandb``). Empty values leave the choice to wandb, which reads WANDB_PROJECT,
    WANDB_ENTITY, WANDB_TAGS and WANDB_MODE."""

    project: str = option(
        "", "W&B project ('': WANDB_PROJECT, else wandb's default)", resume_safe=True
    )
    entity: str = option(
        "", "W&B team or user ('': WANDB_ENTITY, else your default entity)", resume_safe=True
    )
    tags: list[str] = option(help="tags of the W&B run", factory=list, resume_safe=True)
    mode: str = option(
        "",
        "online, offline (files under <run>/wandb; `wandb sync` later) or disabled "
        "('': WANDB_MODE, else online)",
        resume_safe=True,
        choices=("", *WANDB_MODES),
    )

    def __post_init__(self) -> None:
        check_config(self, "logging.wandb")  # choices


@dataclass
class LoggingConfig:
    every: int = option(10, "record metrics every this many steps", resume_safe=True, ge=0)
    progress: bool = option(
        True, "show a progress bar when the output is a terminal", resume_safe=True
    )
    loggers: list[str] = option(
        help="extra metric loggers by name (e.g. tensorboard, wandb)",
        factory=list,
        resume_safe=True,
    )
    peak_flops: float = option(
        0.0,
        "peak FLOP/s per device for MFU (0: chip table, or measured once per machine)",
        resume_safe=True,
        ge=0,
    )
    profile_steps: str = option(
        "",
        "START:END: write a jax.profiler trace of these steps into <run>/profile",
        resume_safe=True,
    )
    wandb: WandbConfig = option(
        help="Weights & Biases options (with 'wandb' in logging.loggers)",
        factory=WandbConfig,
        resume_safe=True,
    )


#: ``eval.every=-1``: evaluate this many times in a run, but not more often than every
#: ``MIN_EVAL_EVERY`` steps (a 100-step run every 25 steps, a 9,000-step one every 450)
EVALUATIONS_PER_RUN = 20
MIN_EVAL_EVERY = 25


def eval_every(every: int, steps: int) -> int:
    """``eval.every`` for a run of ``steps`` steps: as given, or (-1) derived from it."""
    if every >= 0:
        return every
    return max(MIN_EVAL_EVERY, round(steps / EVALUATIONS_PER_RUN))


@dataclass
class EvalConfig:
    every: int = option(
        -1,
        f"validation loss every this many steps (-1: {EVALUATIONS_PER_RUN} times in the run, "
        f"at least {MIN_EVAL_EVERY} steps apart; 0: only at the end)",
        resume_safe=True,
        ge=-1,
    )
    batches: int = option(
        4, "validation batches per evaluation (a fixed set)", resume_safe=True, ge=1
    )
    tasks: list[str] = option(
        help="registered evaluations run at each evaluation (e.g. [val-ppl, addition])",
        factory=list,
        resume_safe=True,
    )
    options: dict[str, Any] = option(
        help="per-task options, e.g. {hellaswag: {files: hs.jsonl, limit: 200}}",
        factory=dict,
        resume_safe=True,
    )


@dataclass
class PrecisionConfig:
    compute_dtype: str = option("", "override the model's compute dtype ('' keeps the model's)")


@dataclass
class InitConfig:
    checkpoint: str = option("", "start from RUN[@STEP] of another run (weights only)")
    hf: str = option("", "start from Hugging Face weights in this directory")

    def __post_init__(self) -> None:
        if self.hf and self.checkpoint:
            raise ConfigError(
                f"init.hf={self.hf!r} and init.checkpoint={self.checkpoint!r}: a run starts "
                "from one source; drop one of them"
            )


@dataclass
class LoRAConfig:
    rank: int = option(
        0, "LoRA rank; 0 trains every parameter, > 0 only adapters on a frozen base", ge=0
    )
    alpha: float = option(
        16.0, "LoRA scale numerator: the update is (alpha / rank) * x @ A @ B", gt=0
    )
    dropout: float = option(0.0, "dropout on the adapters' input during training", ge=0, lt=1)
    targets: list[str] = option(
        help="linear layers that get adapters, by name (q_proj, k_proj, v_proj, o_proj, "
        "up_proj, gate_proj, down_proj) or group (attention, mlp)",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "mlp"],
    )
    base_dtype: str = option(
        "",
        "store the frozen base in this dtype ('' keeps float32)",
        choices=("", "float32", "bfloat16", "float16"),
    )

    def __post_init__(self) -> None:
        check_config(self, "lora")  # ranges and choices
        if self.rank and not self.targets:
            raise ConfigError("lora.targets is empty: name the layers that get adapters")


@dataclass
class TrainJobConfig:
    """The typed config of a training job: one field per config group.

    ``model``, ``optimizer`` and ``schedule`` are instances of the chosen component's own
    config dataclass (with its registered ``name``).
    """

    training: TrainingConfig
    model: ModelConfig
    data: DataConfig
    optimizer: OptimizerBase
    schedule: ScheduleBase
    checkpoint: CheckpointConfig
    logging: LoggingConfig
    eval: EvalConfig
    precision: PrecisionConfig
    init: InitConfig
    sharding: ShardingConfig
    lora: LoRAConfig

    def __post_init__(self) -> None:
        """Every group's numbers within their declared ranges (also for a config built in
        Python rather than by the config tree, which checks each value as it is set); a
        cadence derived from the run's length (``eval.every=-1``) becomes its count."""
        for group in dataclasses.fields(self):
            check_config(getattr(self, group.name), group.name)
        every = eval_every(self.eval.every, self.training.steps())
        if every != self.eval.every:
            self.eval = dataclasses.replace(self.eval, every=every)


def checked_chunks(
    chunks: int, length: int, context: int = 1, length_name: str = "training.seq_len"
) -> int:
    """``training.loss_chunks`` as given, or a one-line error naming it: it must divide the
    ``length`` the loss is cut along (``length_name`` says which), and it cuts no sequence
    that is already split over ``context`` devices."""
    if length % chunks:
        raise ConfigError(f"training.loss_chunks={chunks} does not divide {length_name}={length}")
    if chunks > 1 and context > 1:
        raise ConfigError(
            f"training.loss_chunks={chunks} with the sequence split over {context} devices "
            "(sharding.context): cutting it again would move it between them; use 1 or 0 (auto)"
        )
    return chunks
