"""The training jobs: pretraining on packed tokens, SFT on padded chat rows."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Generic, TypeVar

from theseus.core.errors import JobError
from theseus.core.evaluate.runner import check
from theseus.core.hf_model_config import check_model_against_hf
from theseus.core.jobs import Job, Prerequisite, parse_reference
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir, checkpoint_step
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.loggers import check_loggers
from theseus.core.train.profile import parse_steps
from theseus.core.train.recipe import Recipe
from theseus.core.train.starting_weights import check_starting_weights

log = logging.getLogger(__name__)


def check_init(config: TrainJobConfig, root: str) -> None:
    """``init.checkpoint`` must name a run with checkpoints; ``init.hf`` a folder with a
    config.json that the model config agrees with (the config filled it, see
    ``hf_model_config``); LoRA and DPO need one of them (``train/starting_weights.py``)."""
    check_starting_weights(config)
    if config.init.checkpoint:
        name, at = parse_reference(config.init.checkpoint, "init.checkpoint")
        checkpoint_step(RunDir(root, name), at, "init.checkpoint: ")
    if config.init.hf:
        if not Path(config.init.hf).is_dir():
            raise JobError(f"init.hf: {config.init.hf} is not a directory of Hugging Face weights")
        if not (Path(config.init.hf) / "config.json").is_file():
            raise JobError(f"init.hf: {config.init.hf} has no config.json")
        check_model_against_hf(config.model, config.init.hf)


def check_evaluations(config: TrainJobConfig) -> None:
    """Unknown ``eval.tasks`` or options fail at start-up, not at the first evaluation."""
    if config.eval.tasks:
        check(config.eval.tasks, registries(), config.eval.options)


#: a training job's typed config: ``TrainJobConfig``, or a subclass with the job's own group
JobConfig = TypeVar("JobConfig", bound=TrainJobConfig)


class TrainingJob(Job, Generic[JobConfig]):
    """A training job of config type ``JobConfig``: what it checks before it runs, its dry
    run and its run, the same for every one; only :meth:`recipe` differs."""

    config: JobConfig
    config_type: type[TrainJobConfig] = TrainJobConfig

    @classmethod
    def recipe(cls, config: JobConfig) -> Recipe:
        """How this job trains (``train/recipe.py``): its objective, data layout, batch
        source. A job overrides this, and nothing else."""
        raise NotImplementedError

    @classmethod
    def prerequisites(
        cls, config: JobConfig, root: str, run: RunDir | None = None
    ) -> list[Prerequisite]:
        """The tokenize runs of its datasets (``run``: a resumed run keeps the data it
        recorded); none for a recipe that reads no dataset."""
        from theseus.core.data.api import tokenize_prerequisites  # JAX, Grain: not at import

        check_init(config, root)  # before any prerequisite spends time
        check_evaluations(config)
        parse_steps(config.logging.profile_steps)
        check_loggers(registries(), config.logging.loggers, config)  # e.g. W&B credentials
        if not cls.recipe(config).reads_data:
            return []
        run_dir = run.path if run is not None and run.exists() else None
        return tokenize_prerequisites(config.data, root, run_dir=run_dir)

    @classmethod
    def dry_run(
        cls, config: JobConfig, root: str, as_json: bool = False, target: str | None = None
    ) -> Any:
        """Mesh, abstract state, per-device memory and FLOPs of this job's own step, printed;
        on a ``target`` (``v5p-8``, ``h100x8``, ...) compiled for that chip. Nothing is
        allocated."""
        from theseus.core.plan.dry_run import dry_run

        return dry_run(config, root, as_json, target, recipe=cls.recipe(config))

    def __call__(self) -> dict[str, Any]:
        from theseus.core.recipes.training_run import run_training

        return run_training(self)


class PretrainJob(TrainingJob[TrainJobConfig]):
    @classmethod
    def recipe(cls, config: TrainJobConfig) -> Recipe:
        """Next-token cross entropy on packed documents."""
        return Recipe(layout="packed")


class SFTJob(PretrainJob):
    @classmethod
    def recipe(cls, config: TrainJobConfig) -> Recipe:
        """Cross entropy on padded chat rows, masked to the assistant's tokens."""
        return Recipe(layout="padded")
