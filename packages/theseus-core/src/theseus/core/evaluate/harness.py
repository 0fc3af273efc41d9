"""lm-evaluation-harness as a client of theseus models (optional: ``theseus-core[lm-eval]``).

Three ways in, all of which import :mod:`theseus.core.evaluate.lm_eval_model` (which
registers the model ``theseus`` with lm-eval) before the harness looks the model up:

- ``theseus lm-eval --model theseus --model_args run=RUN,root=ROOT --tasks hellaswag``
  (or ``python -m theseus.core.evaluate.harness ...``): lm-eval's own command line;
- :func:`evaluate` from Python: ``lm_eval.simple_evaluate`` with a theseus model;
- the evaluation ``lm-eval`` (``<model>/evaluate`` with ``evaluate.lm_eval_tasks=[...]``,
  or ``eval.tasks=[lm-eval]`` during training): :func:`run`.

This module imports neither JAX nor lm_eval until it is used.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from theseus.core.evaluate.configs import LM_EVAL_EXTRA as EXTRA
from theseus.core.evaluate.configs import LM_EVAL_FEATURE as FEATURE
from theseus.core.evaluate.configs import LmEvalConfig
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.jobs import parse_reference
from theseus.core.requirements import require
from typer.core import TyperGroup

log = logging.getLogger(__name__)


def load_adapter() -> Any:
    """The ``theseus`` lm-eval model class (registering it); a one-line error without lm-eval."""
    require("lm_eval", FEATURE, package=EXTRA, error=EvaluationError)
    from theseus.core.evaluate.lm_eval_model import TheseusLM

    return TheseusLM


def task_manager(tasks: Sequence[str], include_path: str = "", metadata: Any = None) -> Any:
    """lm-eval's task index: only ``include_path`` when it defines every task asked for
    (reading lm-eval's ~15,000 built-in task files takes seconds), else both."""
    from lm_eval.tasks import TaskManager

    def unknown(manager: Any) -> list[str]:  # names may be globs: mmlu_*
        return [task for task in tasks if not manager.match_tasks([task])]

    if include_path:
        local = TaskManager(include_path=include_path, include_defaults=False, metadata=metadata)
        if not unknown(local):
            return local
    manager = TaskManager(include_path=include_path or None, metadata=metadata)
    missing = unknown(manager)
    if missing:
        where = f" in {include_path} nor" if include_path else ""
        raise EvaluationError(
            f"lm-eval knows no task {', '.join(missing)}{where} among its own tasks "
            "(lm-eval ls tasks lists them)"
        )
    return manager


def evaluate(
    tasks: Sequence[str],
    model_args: str | dict[str, Any] | None = None,
    *,
    target: Any = None,
    include_path: str = "",
    num_fewshot: int | None = None,
    limit: int | float | None = None,
    batch_size: int | None = None,
    max_gen_toks: int = 256,
    apply_chat_template: bool = False,
    log_samples: bool = False,
    bootstrap_iters: int = 0,
    **simple_evaluate_kwargs: Any,
) -> dict[str, Any]:
    """Run lm-eval ``tasks`` on a theseus model; the harness's results dict.

    The model is ``model_args`` (``"run=RUN[@STEP],root=ROOT"``, ``"hf_dir=DIR"`` or a dict
    of the same) or an opened :class:`~theseus.core.evaluate.target.EvalTarget`.
    """
    adapter = load_adapter()
    import lm_eval
    import numpy as np

    tasks = [str(task) for task in tasks]
    if not tasks:
        raise EvaluationError("name at least one lm-eval task")
    if (target is None) == (model_args is None):
        raise EvaluationError("give exactly one of model_args and target")
    manager = task_manager(tasks, include_path)  # an unknown task fails before the model loads
    if target is not None:
        model = adapter(target=target, max_gen_toks=max_gen_toks)
    elif model_args is not None:
        from lm_eval.utils import simple_parse_args_string

        parsed: dict[str, Any] = (
            simple_parse_args_string(model_args) if isinstance(model_args, str) else model_args
        )
        extra = {"batch_size": batch_size} if batch_size else {}
        model = adapter(**{"max_gen_toks": max_gen_toks, **parsed, **extra})
    saved = random.getstate(), np.random.get_state()  # lm-eval seeds the global generators
    try:
        results = lm_eval.simple_evaluate(
            model=model,
            tasks=tasks,
            num_fewshot=num_fewshot,
            limit=limit or None,
            task_manager=manager,
            apply_chat_template=apply_chat_template,
            log_samples=log_samples,
            bootstrap_iters=bootstrap_iters,
            **simple_evaluate_kwargs,
        )
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
    if results is None:  # only on non-zero ranks of a multi-process harness run
        return {}
    results["config"].update(
        model="theseus", model_args=model.source, batch_size=model.batch_size, layout=model.layout
    )
    return plain(results)


def plain(results: dict[str, Any]) -> dict[str, Any]:
    """The results as JSON values (lm-eval's own serialisation of what is not)."""
    from lm_eval.utils import handle_non_serializable

    return json.loads(json.dumps(results, default=handle_non_serializable))


def metrics(results: dict[str, Any]) -> dict[str, float]:
    """``{"<task>/<metric>": value}`` from the harness's results (``acc,none`` becomes
    ``acc``; another filter is kept: ``exact_match/strict-match``; ``sample_len`` is
    ``examples``, as in the built-in evaluations)."""
    out: dict[str, float] = {}
    for task, values in results.get("results", {}).items():
        for key, value in values.items():
            if key == "alias" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and math.isnan(value):
                continue
            name, _, kind = key.partition(",")
            name = "examples" if name == "sample_len" else name
            name = name if kind in ("", "none") else f"{name}/{kind}"
            out[f"{task}/{name}"] = float(value)
    return out


def run(config: LmEvalConfig, target: Any) -> dict[str, float]:
    """The registered evaluation ``lm-eval``: its metrics, flat; the harness's results JSON
    is left in ``target.outputs["lm-eval"]`` for the job or the trainer to save."""
    config.check()
    caps = [n for n in (config.limit, int(target.limit)) if n > 0]
    results = evaluate(
        config.tasks,
        target=target,
        include_path=config.include_path,
        num_fewshot=None if config.num_fewshot < 0 else config.num_fewshot,
        limit=min(caps) if caps else None,
        max_gen_toks=config.max_gen_toks,
        apply_chat_template=config.apply_chat_template,
        log_samples=config.log_samples,
        bootstrap_iters=config.bootstrap_iters,
    )
    target.outputs["lm-eval"] = results
    return metrics(results)


# ----------------------------------------------------------------------------- command line


def option_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--opt VALUE`` or ``--opt=VALUE``)."""
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(f"{name}="):
                return arg[len(name) + 1 :]
    return None


def model_source(args: Sequence[str]) -> dict[str, str]:
    """``run``/``root``/``hf_dir`` of ``--model theseus --model_args ...``; empty otherwise."""
    if option_value(args, "--model") != "theseus":
        return {}
    model_args = option_value(args, "--model_args") or ""
    pairs = (part.partition("=") for part in model_args.split(",") if "=" in part)
    return {key.strip(): value.strip() for key, _, value in pairs if key.strip()}


def results_name(source: dict[str, str]) -> str | None:
    """What names the results folder under ``--output_path`` (lm-eval draws a random name
    for a model without ``pretrained=``): the run (``RUN@STEP`` as ``RUN-at-STEP``) or the
    Hugging Face folder's name."""
    if source.get("run"):
        return source["run"].replace("@", "-at-")
    if source.get("hf_dir"):
        return Path(source["hf_dir"]).expanduser().resolve().name or None
    return None


def placed_output(args: Sequence[str]) -> list[str]:
    """``args`` with ``--output_path`` into the run's folder when a run is evaluated without
    one: ``<root>/runs/<RUN>/lm-eval/results_<time>.json`` (and its samples beside it)."""
    args = list(args)
    source = model_source(args)
    if not source.get("run") or option_value(args, "--output_path", "-o") is not None:
        return args
    from theseus.core.runner import default_root

    name, _ = parse_reference(source["run"], "model_args run")
    root = Path(source.get("root") or default_root())
    return [*args, "--output_path", str(root / "runs" / name / "lm-eval" / "results.json")]


def with_device(args: Sequence[str]) -> list[str]:
    """``args`` naming the JAX backend as ``--device`` when they name no device: lm-eval's
    default, ``cuda:0``, would otherwise reach the model (which notes that it ignores it)
    and be recorded in the results as the device, on a machine without any GPU."""
    if option_value(args, "--device") is not None:
        return list(args)
    import jax

    return [*args, "--device", jax.default_backend()]


def main(argv: Sequence[str] | None = None) -> None:
    """lm-eval's command line with the ``theseus`` model registered; the results of a run
    land in its folder (see :func:`placed_output`), or under ``--output_path`` in a folder
    named after the run, not a random one."""
    load_adapter()
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

    args = placed_output(sys.argv[1:] if argv is None else argv)
    if model_source(args):  # the theseus model: where JAX runs it, not lm-eval's cuda:0
        args = with_device(args)
    name = results_name(model_source(args))
    saved, naming = sys.argv, GeneralConfigTracker.__dict__["_get_model_name"]
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv
    if name:  # lm-eval's name for a model without pretrained=: a random one
        GeneralConfigTracker._get_model_name = staticmethod(lambda model_args: name)
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
        GeneralConfigTracker._get_model_name = naming


class _PassThrough(TyperGroup):
    """A command whose arguments, options and ``--help`` all go to lm-eval's own parser."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["lm_eval_args"] = list(args)
        return []

    def invoke(self, ctx: Any) -> Any:
        return main(ctx.meta.get("lm_eval_args", []))


def command() -> typer.Typer:
    """``theseus lm-eval ARGS``: lm-eval's command line, ``--model theseus`` registered."""
    app = typer.Typer(
        cls=_PassThrough,
        add_completion=False,
        help="lm-evaluation-harness: --model theseus --model_args run=RUN,root=ROOT "
        "(or hf_dir=DIR) --tasks ... (lm-eval's own options; theseus lm-eval --help)",
    )
    return app


if __name__ == "__main__":
    try:
        main()
    except EvaluationError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
