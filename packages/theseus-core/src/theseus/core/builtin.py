"""Core's own plugin: optimizers, schedules, loggers, evaluations, commands and the core jobs.

Registered through the entry point ``core = "theseus.core.builtin"`` exactly like any
third-party plugin.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import Component, JobSpec
from theseus.core.evaluate.builtin import register_evaluations
from theseus.core.evaluate.harness import command
from theseus.core.evaluate.job import register_evaluate_jobs
from theseus.core.hookspecs import hookimpl
from theseus.core.inspect import commands, rebuild
from theseus.core.optim import configs as oc
from theseus.core.recipes.jobs import register_training_jobs
from theseus.core.serve.command import serve

OPTIM = "theseus.core.optim.optimizers"
SCHED = "theseus.core.optim.schedules"


# (name, config, function in its module, description) of the built-in optimizers, schedules
OPTIMIZERS = [
    ("adamw", oc.AdamWConfig, "adamw", "AdamW with decoupled weight decay"),
    ("lion", oc.LionConfig, "lion", "Lion (sign momentum)"),
    ("sgd", oc.SGDConfig, "sgd", "SGD with (Nesterov) momentum"),
    ("adafactor", oc.AdafactorConfig, "adafactor", "Adafactor"),
    ("muon", oc.MuonConfig, "muon", "Muon for matrices, AdamW for the rest"),
]
SCHEDULES = [
    ("constant", oc.ConstantConfig, "constant", "warmup, then constant"),
    ("cosine", oc.CosineConfig, "cosine", "warmup, then cosine decay"),
    ("wsd", oc.WSDConfig, "wsd", "warmup-stable-decay"),
    ("linear-warmup", oc.LinearWarmupConfig, "linear_warmup", "linear warmup"),
]


@hookimpl
def theseus_register_optimizers(register):
    for name, config, function, description in OPTIMIZERS:
        register(Component(name, config, f"{OPTIM}:{function}", description))


@hookimpl
def theseus_register_schedules(register):
    for name, config, function, description in SCHEDULES:
        register(Component(name, config, f"{SCHED}:{function}", description))


@dataclass
class NoOptions:
    """The built-in loggers have no options of their own here: they read the run's config
    (``logging.wandb.*`` for W&B)."""


@hookimpl
def theseus_register_loggers(register):
    target = "theseus.core.train.loggers"
    register(
        Component("tensorboard", NoOptions, f"{target}:TensorBoardLogger", "TensorBoard scalars")
    )
    wandb = Component(
        "wandb", NoOptions, f"{target}:WandbLogger", "Weights & Biases",
        extra={"secrets": ("WANDB_API_KEY",)},
    )  # fmt: skip
    register(wandb)


@hookimpl
def theseus_register_evaluations(register):
    register_evaluations(register)


@hookimpl
def theseus_register_rewards(register):
    target = "theseus.core.recipes.rewards"
    for name, function, description in (
        ("addition_exact", "exact_answer", "1 when the completion is exactly the answer"),
        ("addition_digits", "digit_match", "the share of the answer's digits in place"),
        ("addition_format", "digits_only", "1 when the completion is a number and nothing else"),
        ("hash_answer", "hash_answer", "1 when the number after #### (else the last) matches"),
    ):
        register(Component(name, NoOptions, f"{target}:{function}", description))


@hookimpl
def theseus_register_commands(register):
    register("runs", commands.runs)
    register("show", commands.show)
    register("plot", commands.plot)
    register("inspect", commands.inspect)
    register("rebuild-record", rebuild.command)

    register("lm-eval", command())  # lm-evaluation-harness with --model theseus

    register("serve", serve)  # a read-only web view of the root (theseus-core[serve])


@hookimpl
def theseus_register_jobs(register, registries):
    register(
        JobSpec(
            key="core/info",
            target="theseus.core.info:InfoJob",
            description="print versions, plugins and the devices JAX sees",
            groups={},
            resumes=False,
        )
    )

    register_training_jobs(register, registries)

    register_evaluate_jobs(register, registries)
