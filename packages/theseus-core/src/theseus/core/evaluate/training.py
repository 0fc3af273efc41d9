"""Evaluations during training (``eval.tasks``), called where the trainer writes ``val/loss``."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
BATCH_SIZE = 8


def run_training_evaluations(trainer: Any, params: Any, step: int, writer: Any) -> dict:
    """Run ``eval.tasks`` on the current parameters; write ``evaluations/step-<k>.json`` in
    the run and the same numbers to the metrics log. Does nothing when no task is set."""
    tasks = [str(t) for t in (trainer.config.eval.get("tasks") or [])]
    if not tasks:
        return {}
    from flax import nnx
    from omegaconf import OmegaConf
    from theseus.core.evaluate.runner import evaluate, metrics_record, write_json
    from theseus.core.evaluate.target import EvalTarget, load_saved_tokenizer

    config = trainer.config
    target = EvalTarget(
        model=nnx.merge(trainer.graphdef, params, trainer.rest),
        tokenizer=load_saved_tokenizer(trainer.data.tokenizer_dir),
        root=str(trainer.context.root),
        data=config.data,
        seq_len=int(config.training.seq_len),
        seed=int(config.training.seed),
        layout=trainer.data.layout,
        batch_size=BATCH_SIZE,
    )
    node = trainer.config.eval.get("options")  # per-task options, where the schema has them
    options = OmegaConf.to_container(node, resolve=True) if node else {}
    results = evaluate(target, tasks, trainer.registries, options)
    write_json(
        trainer.run.path / "evaluations" / f"step-{step}.json",
        {"source": {"run": trainer.run.name, "step": step}, "tasks": tasks, "results": results},
    )
    writer.write(metrics_record(step, results))
    return results
