"""Evaluations during training (``eval.tasks``): what a training job gives its trainer as
the evaluations beside the validation loss."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from theseus.core.evaluate.runner import evaluate, metrics_record, write_json
from theseus.core.evaluate.target import run_target

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.rundir import RunDir
    from theseus.core.train.evaluation import RecordWriter, Tasks
    from theseus.core.train.run_tokenizer import TokenizerOnly
    from theseus.core.train.setup import TrainSetup

log = logging.getLogger(__name__)
BATCH_SIZE = 8


def training_tasks(
    setup: TrainSetup, data: TrainingData | TokenizerOnly, root: str, run: RunDir
) -> Tasks | None:
    """``eval.tasks`` on the parameters of a step: each evaluation writes
    ``evaluations/step-<k>.json`` in the run (and ``step-<k>.lm-eval.json``, the harness's
    own results, for ``lm-eval``) and the same numbers to the metrics log. ``None`` when no
    task is set."""
    config = setup.config
    if not config.eval.tasks:
        return None

    def tasks(params: Any, step: int, writer: RecordWriter) -> dict[str, Any]:
        target = run_target(setup, data, params, str(root), batch_size=BATCH_SIZE)
        results = evaluate(target, config.eval.tasks, setup.registries, config.eval.options)
        folder = run.path / "evaluations"
        source = {"run": run.name, "step": step}
        write_json(
            folder / f"step-{step}.json",
            {"source": source, "tasks": config.eval.tasks, "results": results},
        )
        for name, payload in target.outputs.items():  # e.g. the harness's results JSON
            write_json(folder / f"step-{step}.{name}.json", payload)
        writer.write(metrics_record(step, results))
        return results

    return tasks
