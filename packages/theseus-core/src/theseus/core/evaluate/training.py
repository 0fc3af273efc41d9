"""Evaluations during training (``eval.tasks``), called where the trainer writes ``val/loss``."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
BATCH_SIZE = 8


def run_training_evaluations(trainer: Any, params: Any, step: int, writer: Any) -> dict:
    """Run ``eval.tasks`` on the current parameters; write ``evaluations/step-<k>.json`` in
    the run (and ``step-<k>.lm-eval.json``, the harness's own results, for ``lm-eval``) and
    the same numbers to the metrics log. Does nothing when no task is set."""
    tasks = trainer.config.eval.tasks
    if not tasks:
        return {}
    from theseus.core.evaluate.runner import evaluate, metrics_record, write_json
    from theseus.core.evaluate.target import run_target

    target = run_target(
        trainer.setup, trainer.data, params, str(trainer.context.root), batch_size=BATCH_SIZE
    )
    results = evaluate(target, tasks, trainer.setup.registries, trainer.config.eval.options)
    write_json(
        trainer.run.path / "evaluations" / f"step-{step}.json",
        {"source": {"run": trainer.run.name, "step": step}, "tasks": tasks, "results": results},
    )
    for name, payload in target.outputs.items():  # e.g. the harness's results JSON
        write_json(trainer.run.path / "evaluations" / f"step-{step}.{name}.json", payload)
    writer.write(metrics_record(step, results))
    return results
