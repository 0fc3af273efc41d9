"""A training run's job and typed config as it saved them (``job.json``, ``config.yaml``):
what ``open_run`` restores a state into, and what a run started from it reads of it
without its state (its tokenizer)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from theseus.core.config import flatten
from theseus.core.config_sources import parse_overrides
from theseus.core.errors import ConfigError, JobError, TheseusError
from theseus.core.rundir import RunDir, missing_run
from theseus.core.runner import config_for, job_spec
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import PRETRAIN, Recipe

if TYPE_CHECKING:
    from theseus.core.registry import Registries


class OpenRunError(JobError):
    """A run that cannot be opened at the step asked for."""


def training_job(
    run: RunDir, registries: Registries, prefix: str, error: type[TheseusError]
) -> tuple[str, Any, type]:
    """``(key, spec, job class)`` of the training job ``run`` recorded; one line raised as
    ``error`` when there is no such run, or its record names no job or one that is not a
    training job."""
    if not run.exists():
        raise error(f"{prefix}{missing_run(run)}")
    try:
        record = run.read_record()
    except JobError as failure:
        raise error(f"{prefix}{failure}") from failure
    key = record.get("key")
    if not isinstance(key, str):
        raise error(f"{prefix}{run.record_path} names no job (no 'key')")
    spec = job_spec(key, registries)
    job_class = spec.load()
    config_type = getattr(job_class, "config_type", None)
    if not (isinstance(config_type, type) and issubclass(config_type, TrainJobConfig)):
        raise error(f"{prefix}run {run.name!r} is a {key} run, not a training run")
    return key, spec, job_class


def saved_config(
    run: RunDir,
    spec: Any,
    registries: Registries,
    overrides: Iterable[str],
    prefix: str,
    error: type[TheseusError],
) -> tuple[TrainJobConfig, str]:
    """The run's typed config, and the schema keys its saved file lacks ("" if none)."""
    try:
        base = run.read_config()
        tree = config_for(spec, registries, [], base)
        tree.validate()
    except TheseusError as failure:
        reason = str(failure)
        if str(run.config_path) not in reason:
            reason = f"{run.config_path} does not fit {spec.key}: {reason}"
        raise error(f"{prefix}{reason}") from failure
    tree.apply(parse_overrides(list(overrides)))
    saved = {key for key, _ in flatten(base, tree=tree)}
    missing = [key for key in tree.keys() if key not in saved]
    lacking = ""
    if missing:
        listing = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        lacking = f"{len(missing)} key(s) ({listing})"
    try:
        return tree.to_object(spec.load().config_type), lacking
    except ConfigError as failure:
        raise error(f"{prefix}{run.config_path}: {failure}") from failure


def recipe_of(job_class: type, config: TrainJobConfig) -> Recipe:
    """The recipe the run trained with (its objective, reference, batch fields), so a
    replayed step is the step it logged; pretraining's for a job that states none."""
    recipe = getattr(job_class, "recipe", None)
    return PRETRAIN if recipe is None else recipe(config)
