"""Every extension point of theseus, in one place.

A plugin is a module named by an entry point in the group ``theseus``::

    [project.entry-points.theseus]
    myplugin = "myplugin.plugin"

The module defines functions decorated with :data:`hookimpl` whose names match the
specs below. Each ``theseus_register_*`` hook receives a ``register`` callback; call it
once per thing you provide. Register *descriptions* (a config dataclass plus an import
path), not loaded objects: the module holding your hooks is imported by every ``theseus``
command, so it must stay cheap to import (no JAX, no torch at module level).

Hooks are called in the order they appear here: components first, then jobs (which may
be generated from the components, e.g. one training job per registered model), then
dispatch targets and CLI commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "theseus"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# ----------------------------------------------------------------------------- components


@hookspec
def theseus_register_models(register: Callable[..., None]) -> None:
    """Register model families.

    Call ``register(Component(name="gpt", config=GPTConfig, target="pkg.module:GPT"))``.
    ``config`` is the model's config dataclass; ``target`` names the class that builds the
    model from it (see ``theseus.core.model.ModelFamily`` for what that class provides).
    Core gives each registered model the jobs ``<name>/train/pretrain``,
    ``<name>/train/sft`` and ``<name>/evaluate`` (theseus-models adds ``<name>/generate``).
    """


@hookspec
def theseus_register_datasets(register: Callable[..., None]) -> None:
    """Register datasets.

    Call ``register(Component(name=..., config=..., target="pkg.module:Dataset"))``. Each
    registered dataset gets a ``data/tokenize/<name>`` job.
    """


@hookspec
def theseus_register_tokenizers(register: Callable[..., None]) -> None:
    """Register tokenizer kinds (``bpe``, ``hf``, ``tiktoken``, ``byte``, ...)."""


@hookspec
def theseus_register_optimizers(register: Callable[..., None]) -> None:
    """Register optimizers.

    ``target`` names a function ``build(config, learning_rate) -> optax.GradientTransformation``
    where ``learning_rate`` is a schedule (a callable of the step).
    """


@hookspec
def theseus_register_schedules(register: Callable[..., None]) -> None:
    """Register learning-rate schedules.

    ``target`` names a function ``build(config, peak_lr, total_steps) -> optax.Schedule``.
    """


@hookspec
def theseus_register_evaluations(register: Callable[..., None]) -> None:
    """Register evaluations (perplexity, multiple choice, generation with exact match...)."""


@hookspec
def theseus_register_loggers(register: Callable[..., None]) -> None:
    """Register metric loggers (JSON lines, TensorBoard, Weights & Biases...).

    A logger's module is imported only when the user enables it.
    """


# ----------------------------------------------------------------------------- jobs


@hookspec
def theseus_register_jobs(register: Callable[..., None], registries: Any) -> None:
    """Register jobs under slash keys.

    Call ``register(JobSpec(key="data/tokenize/fineweb", target="pkg.module:Job",
    description="...", groups={...}))``. ``registries`` holds every component registry
    filled by the hooks above, so a plugin can generate one job per model or dataset.
    """


# ----------------------------------------------------------------------------- dispatch


@hookspec
def theseus_register_dispatch_targets(register: Callable[..., None]) -> None:
    """Register dispatch backends (``ssh``, ``slurm``, ``volcano``, ``gcp-tpu``, ...)."""


# ----------------------------------------------------------------------------- CLI


@hookspec
def theseus_register_commands(register: Callable[..., None]) -> None:
    """Add commands to the ``theseus`` CLI.

    Call ``register(name, function)`` with a Typer-compatible function (its signature
    and docstring become the command's arguments and help), or ``register(name, typer_app)``
    for a group of sub-commands. Keep heavy imports inside the function body.
    """
