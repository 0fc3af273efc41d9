"""What a training job does when it runs: data, setup, trainer, summary; the same for
every training job, each shaped only by its recipe (``train/recipe.py``).

Kept apart from the job classes (``pretrain.py``, ``dpo.py``), which the CLI imports to
read configs and plan dry runs before JAX may start; this module imports JAX.
"""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

from theseus.core.evaluate.training import training_tasks
from theseus.core.jobs import JobContext
from theseus.core.rundir import RunDir
from theseus.core.sharding.distributed import initialize_from_env
from theseus.core.train.job_layout import job_layout
from theseus.core.train.recipe import Recipe
from theseus.core.train.run_tokenizer import TokenizerOnly, tokenizer_only
from theseus.core.train.setup import TrainSetup, open_data, plan_batch
from theseus.core.train.trainer import Trainer

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData

log = logging.getLogger(__name__)


class TrainingJob(Protocol):
    """A training job as the run sees it (``recipes/pretrain.py``'s ``PretrainJob`` and its
    subclasses): its typed config, its context and run folder, and its recipe."""

    config: Any  # a TrainJobConfig
    context: JobContext

    @property
    def run(self) -> RunDir: ...

    def recipe(self, config: Any) -> Recipe: ...


def run_training(job: TrainingJob) -> dict[str, Any]:
    """Train ``job``'s run to its last step (resuming, branching or starting it)."""
    initialize_from_env()  # multi-host: before anything touches a device
    config, context = job.config, job.context
    recipe = job.recipe(config)
    layout = job_layout(config)  # the mesh first, then the batch plan on it
    batch = plan_batch(config, recipe.layout, layout)  # the loader and the step both take it
    data: TrainingData | TokenizerOnly = (
        open_data(config, context.root, recipe.layout, run=job.run, batch=batch)
        if recipe.reads_data
        else tokenizer_only(context.root, config, recipe, context.registries)  # GRPO
    )
    setup = TrainSetup.build(config, context.registries, data.vocab_size, recipe, layout, batch)
    if recipe.batches is not None:
        batches = recipe.batches(setup, data, job.run)
    else:  # the loader's (a recipe that reads no dataset makes its own: ``Recipe``)
        assert not isinstance(data, TokenizerOnly)
        batches = data
    tasks = training_tasks(setup, data, context.root, job.run) if recipe.validation else None
    trainer = Trainer(
        setup,
        batches,
        context,
        tasks,
        callbacks=recipe.callbacks,
        validation=recipe.validation,
    )
    summary = trainer.fit()
    write_summary(job.run, summary)
    log.info(finished_line(job.run.name, summary))
    return summary


def finished_line(name: str, summary: dict[str, Any]) -> str:
    """The line a finished training prints: ``finished RUN at step 100: train/loss 2.31,
    val/loss 2.40`` (then any other number; ``skipped`` only when steps were skipped)."""
    step = summary.get("step")
    values = []
    for key, value in summary.items():
        if key == "step" or (key == "skipped" and not value):
            continue
        if isinstance(value, float):
            values.append(f"{key} {value:.4g}")
        elif isinstance(value, int | str) and not isinstance(value, bool):
            values.append(f"{key} {value}")
    at = f" at step {step}" if step is not None else ""
    return f"finished {name}{at}" + (f": {', '.join(values)}" if values else "")


def write_summary(run: RunDir, summary: dict[str, Any]) -> None:
    """``<run>/summary.json``: always valid JSON (a NaN or infinite loss is written null)."""
    finite = {
        k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in summary.items()
    }
    text = json.dumps(finite, indent=2, allow_nan=False)
    (run.path / "summary.json").write_text(text + "\n")
