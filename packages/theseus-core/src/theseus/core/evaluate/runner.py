"""Run registered evaluations against a target; write results JSON and metrics lines."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.target import EvalTarget

if TYPE_CHECKING:
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


def task_config(component: Any, options: Mapping[str, Any] | None) -> Any:
    """The evaluation's config dataclass with ``options`` applied (unknown keys are errors)."""
    options = dict(options or {})
    known = {f.name for f in dataclasses.fields(component.config)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise EvaluationError(
            f"evaluation {component.name!r} has no option(s) {', '.join(unknown)} "
            f"(options: {', '.join(sorted(known))})"
        )
    return component.config(**options)


def check(
    tasks: Sequence[str], registries: Registries, options: Mapping[str, Any] | None = None
) -> list[tuple[Any, Any]]:
    """``(component, config)`` of each task; unknown tasks or options, and whatever a
    config's own ``check()`` refuses, fail before any work."""
    options = dict(options or {})
    stray = sorted(set(options) - set(tasks))
    if stray:
        raise EvaluationError(f"options given for {', '.join(stray)}, which is not in the tasks")
    if len(set(tasks)) != len(tasks):
        raise EvaluationError(f"a task is listed twice in {list(tasks)}")
    components = [registries.evaluations.get(str(name)) for name in tasks]
    configs = [(c, task_config(c, options.get(c.name))) for c in components]
    for _, config in configs:  # a config may check more: an optional dependency, ...
        if callable(getattr(config, "check", None)):
            config.check()
    return configs


def evaluate(
    target: EvalTarget,
    tasks: Sequence[str],
    registries: Registries,
    options: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, float]]:
    """``{task: {metric: value}}`` for each named evaluation, in order."""
    configs = check(tasks, registries, options)
    results: dict[str, dict[str, float]] = {}
    for component, config in configs:
        started = time.perf_counter()
        metrics = component.load()(config, target)
        log.info(
            "evaluation %s: %s (%.1fs)",
            component.name,
            " ".join(f"{k}={v:.6g}" for k, v in metrics.items()),
            time.perf_counter() - started,
        )
        results[component.name] = {k: _plain(v) for k, v in metrics.items()}
    return results


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def metrics_record(step: int, results: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """One metrics-log line: ``{"step": k, "eval/<task>/<metric>": value, ...}``."""
    record: dict[str, Any] = {"step": int(step)}
    for task, metrics in results.items():
        for name, value in metrics.items():
            record[f"eval/{task}/{name}"] = value
    return record


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def append_metrics(path: Path, record: Mapping[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(dict(record)) + "\n")
