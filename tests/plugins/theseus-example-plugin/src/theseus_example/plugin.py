"""The example plugin's hooks: what a third-party package registers, and nothing more.

Everything heavy (JAX, Optax) lives in the modules named by the ``target`` strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import Choice, Component, JobSpec, option
from theseus.core.hookspecs import hookimpl
from theseus.core.optim.configs import OptimizerBase, ScheduleBase


@dataclass
class SignumConfig(OptimizerBase):
    """Signum's options; ``weight_decay`` and ``grad_clip`` come from the base class, and core
    applies them around ``signum`` (which reads neither)."""

    learning_rate: float = option(
        0.025, "step size of each signed update (fit-line's default: the slope reaches 3.0)", gt=0
    )
    grad_clip: float = option(
        0.0, "clip the global gradient norm first (0: off; the sign drops the scale anyway)", ge=0
    )
    momentum: float = option(0.9, "momentum applied before taking the sign", ge=0, lt=1)


@dataclass
class StepDecayConfig(ScheduleBase):
    every: int = option(100, "multiply the rate by `factor` every this many steps", ge=1)
    factor: float = option(0.5, "decay factor", gt=0, le=1)


@dataclass
class RhymesConfig:
    documents: int = option(2000, "how many rhymes to generate", ge=1)
    seed: int = option(0, "seed of the generator", ge=0)
    max_documents: int = option(0, "use at most this many rhymes (0: all)", ge=0)


@dataclass
class FitLineConfig:
    slope: float = option(3.0, "slope of the line the data is drawn from", finite=True)
    intercept: float = option(-1.0, "intercept of the line", finite=True)
    noise: float = option(0.1, "standard deviation of the noise", ge=0)
    points: int = option(256, "number of data points", ge=1)
    steps: int = option(300, "optimizer steps", ge=1)
    seed: int = option(0, "random seed for the data", ge=0)


@hookimpl
def theseus_register_datasets(register):
    register(
        Component(
            "counting-rhymes", RhymesConfig, "theseus_example.dataset:CountingRhymes", "rhymes"
        )
    )


@hookimpl
def theseus_register_optimizers(register):
    register(Component("signum", SignumConfig, "theseus_example.optim:signum", "sign of momentum"))


@hookimpl
def theseus_register_schedules(register):
    register(
        Component("step-decay", StepDecayConfig, "theseus_example.optim:step_decay", "staircase")
    )


@hookimpl
def theseus_register_jobs(register, registries):
    register(
        JobSpec(
            key="example/fit-line",
            target="theseus_example.fit_line:FitLine",
            description="fit a noisy line with any registered optimizer (plugin example)",
            groups={
                "task": FitLineConfig,
                "optimizer": Choice("optimizers", "signum"),
                "schedule": Choice("schedules", "step-decay"),
            },
        )
    )
