"""The ``<model>/evaluate`` job: registered evaluations on a checkpoint or imported weights.

Writes ``results.json`` (source, tasks, scores) into its run directory and the same
numbers as one line of ``metrics.jsonl`` (``eval/<task>/<metric>``); with lm-eval tasks
(``evaluate.lm_eval_tasks``), the harness's own results JSON as ``lm-eval.json`` beside it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from theseus.core.components import per_model_job
from theseus.core.evaluate.configs import EvaluateConfig
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.runner import append_metrics, check, evaluate, metrics_record, write_json
from theseus.core.evaluate.target import checkpoint_target, hf_target
from theseus.core.jobs import Job, parse_reference
from theseus.core.rundir import RunDir

if TYPE_CHECKING:
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


class EvaluateJob(Job):
    def target(self) -> tuple[Any, dict]:

        e = self.config.evaluate
        common = dict(batch_size=e.batch_size, padding_side=e.padding_side, limit=e.limit)
        if bool(e.checkpoint) == bool(e.hf_dir):
            raise EvaluationError(
                "set exactly one of evaluate.checkpoint=RUN[@STEP] and evaluate.hf_dir=DIR"
            )
        if e.hf_dir:
            return hf_target(
                e.hf_dir, e.tokenizer, self.context.registries, root=self.context.root, **common
            )
        self._check_family(parse_reference(e.checkpoint, "evaluate.checkpoint")[0])
        return checkpoint_target(self.context.root, e.checkpoint, **common)

    def _check_family(self, run_name: str) -> None:

        key = RunDir(self.context.root, run_name).read_record().get("key", "")
        family = key.split("/")[0]
        if family != self.config.model.name:
            raise EvaluationError(
                f"run {run_name!r} is a {key} run: evaluate it with {family}/evaluate, "
                f"not {self.config.model.name}/evaluate"
            )

    def tasks(self) -> tuple[list[str], dict[str, Any]]:
        """``evaluate.tasks`` and their options, with ``evaluate.lm_eval_tasks`` as the
        evaluation ``lm-eval``."""
        e = self.config.evaluate
        tasks, options = list(e.tasks), dict(e.options or {})
        if e.lm_eval_include_path and not e.lm_eval_tasks:
            raise EvaluationError("evaluate.lm_eval_include_path is set but lm_eval_tasks is empty")
        if e.lm_eval_tasks:
            if "lm-eval" in tasks:
                raise EvaluationError(
                    "lm-eval tasks are given twice: in evaluate.lm_eval_tasks and as the "
                    "evaluation lm-eval in evaluate.tasks; keep one"
                )
            tasks.append("lm-eval")
            chosen = {"tasks": list(e.lm_eval_tasks), "include_path": e.lm_eval_include_path}
            options["lm-eval"] = {**dict(options.get("lm-eval") or {}), **chosen}
        if not tasks:
            raise EvaluationError(
                "evaluate.tasks and evaluate.lm_eval_tasks are empty: name at least one evaluation"
            )
        return tasks, options

    def __call__(self) -> dict[str, Any]:

        e = self.config.evaluate
        tasks, options = self.tasks()
        check(tasks, self.context.registries, options)
        target, source = self.target()
        results = evaluate(target, tasks, self.context.registries, options)
        payload = {
            "source": source,
            "tasks": tasks,
            "batch_size": e.batch_size,
            "padding_side": e.padding_side,
            "results": results,
        }
        for name, output in target.outputs.items():  # the harness's results JSON, ...
            write_json(self.run.path / f"{name}.json", output)
            payload.setdefault("files", {})[name] = f"{name}.json"
        write_json(self.run.path / "results.json", payload)
        append_metrics(self.run.metrics_path, metrics_record(source.get("step", 0), results))
        for task, metrics in results.items():
            shown = " ".join(f"{k}={v:.6g}" for k, v in metrics.items())
            print(f"{task}: {shown}")
        return payload


def register_evaluate_jobs(register: Any, registries: Registries) -> None:
    """Register ``<model>/evaluate`` for every registered model."""
    for name in registries.models.names():
        if f"{name}/evaluate" in registries.jobs:
            continue
        described = (
            f"evaluate a {name} checkpoint or imported weights on registered evaluations "
            "(val-ppl, hellaswag, arc, mmlu, gsm8k, addition, ...)"
        )
        target = "theseus.core.evaluate.job:EvaluateJob"
        register(per_model_job(name, "evaluate", target, described, ("evaluate", EvaluateConfig)))
