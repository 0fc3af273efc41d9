"""``theseus submit``: resolve the run locally, pick a target, bundle, launch, record."""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import typer
from theseus.core.errors import TheseusError
from theseus.dispatch import state
from theseus.dispatch.bootstrap import Submission
from theseus.dispatch.solver import solve
from theseus.dispatch.targets.base import ACTIVE, FINISHED, Request

if TYPE_CHECKING:
    from theseus.core.config import ConfigTree
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


def resolve(
    registries: Registries, job: str, overrides: list[str], name: str | None
) -> tuple[str, str]:
    """Validate the job and overrides here (strict config) -> (run name, config YAML)."""
    name, tree = resolve_tree(registries, job, overrides, name)
    return name, tree.to_yaml()


def resolve_tree(
    registries: Registries, job: str, overrides: list[str], name: str | None
) -> tuple[str, ConfigTree]:
    """(run name, the validated config tree) of the job and overrides."""
    from theseus.core.jobs import check_run_name, default_run_name, unique_run_name
    from theseus.core.runner import config_for, job_spec

    spec = job_spec(job, registries)
    tree = config_for(spec, registries, overrides)
    tree.validate()
    if name is None:  # a one-shot job's runs never share a name (the target's root is remote)
        name = default_run_name(job) if spec.resumes else unique_run_name(job, None)
    return check_run_name(name), tree


def read_secrets(target_name: str, names: list[str]) -> dict[str, str]:
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise TheseusError(
            f"target {target_name!r} forwards secret(s) {', '.join(missing)} "
            "but they are not set in this environment"
        )
    return {n: os.environ[n] for n in names}


def submit_run(
    session: Any,
    job: str,
    overrides: list[str],
    *,
    to: str,
    chips: int | None,
    chip: str | None,
    nodes: int | None,
    name: str | None,
    dry_run: bool,
) -> dict[str, Any] | None:
    run_name, tree = resolve_tree(session.registries, job, overrides, name)
    config_yaml = tree.to_yaml()
    from theseus.dispatch import leaks, script_values

    # before any target is asked anything: what the command line brings, against the secrets
    # of every target and the environment's credential-named variables
    everyone = type("AllTargets", (), {"secrets": _all_secrets(session)})()
    unsent = Submission(
        job=job, overrides=overrides, name=run_name, target="", config_yaml=config_yaml
    )
    leaks.check_values(leaks.leaving_values(unsent, object()), leaks.known_secrets(everyone))
    script_values.check_submission(unsent, object(), "")
    request = Request(chips=chips, chip=chip, nodes=nodes)
    target_name, node_count = solve(
        session.config.targets, session.config.priority, to, request, session.backend,
        live=not dry_run,
    )  # fmt: skip
    target = session.config.targets[target_name]
    sub = Submission(
        job=job,
        overrides=overrides,
        name=run_name,
        target=target_name,
        nodes=node_count,
        chips=chips or node_count * target.chips_per_node,
        chip=target.chip,
        config_yaml=config_yaml,
        attempt=uuid.uuid4().hex[:12],
    )
    leaks.check_submission(sub, target)  # the target's keys too, before anything is written
    script_values.check_submission(sub, target, target_name)
    backend = session.backend(target_name)
    if dry_run:  # contacts nothing: no live check, no status of an earlier submission
        recipe = recipe_lines(tree, session.registries, target, run_name)
        _print_plan(backend, sub, target, config_yaml, recipe)
        return None
    _refuse_if_active_elsewhere(session, run_name, target_name)

    existing = backend.find(sub)
    if existing is not None:
        existing["name"] = run_name
        current = backend.status(existing)
        if current.state in ACTIVE or current.state == FINISHED:
            _record(sub, target, existing, bundle_sha=None)
            verb = "is already running" if current.state in ACTIVE else "already finished"
            typer.echo(f"run {run_name} {verb} on {target_name}; not launching it again")
            return existing

    secrets = read_secrets(target_name, target.secrets)
    from theseus.dispatch.bundle import find_workspace, make_bundle

    bundle = make_bundle(find_workspace(), secrets=secrets)
    started = time.monotonic()
    handle = backend.launch(sub, bundle, secrets)
    handle["name"] = run_name
    _record(sub, target, handle, bundle_sha=bundle.sha)
    typer.echo(
        f"submitted run {run_name} ({job}) to {target_name} [{target.type}] on {node_count} "
        f"node(s) in {time.monotonic() - started:.1f} s; bundle {bundle.short} "
        f"({len(bundle.files)} files, {len(bundle.data) // 1024} KiB)"
    )
    return handle


def recipe_lines(tree: ConfigTree, registries: Registries, target: Any, name: str) -> list[str]:
    """How a training run trains, as its plan says (none for another job): the schedule,
    evaluation and where its metrics go on the target, and what is sized for a short run."""
    from theseus.core.plan.recipe_summary import lines, summary

    groups = ("training", "optimizer", "schedule", "eval", "checkpoint", "logging")
    if not all(group in tree.schemas for group in groups):
        return []
    config = tree.to_object()
    forwarded = set(target.secrets)
    idle = {
        logger: secret
        for logger, component in registries.loggers.items()
        for secret in component.extra.get("secrets", ())
        if secret in forwarded and logger not in config.logging.loggers
    }
    metrics_at = f"{target.root}/runs/{name}/metrics.jsonl"
    return lines(summary(config, metrics_at, idle))


def _print_plan(
    backend: Any, sub: Submission, target: Any, config_yaml: str, recipe: list[str]
) -> None:
    """``--dry-run``: the plan, made from the config file and this workspace alone."""
    from theseus.dispatch.bundle import find_workspace, workspace_files

    workspace = find_workspace()
    files = workspace_files(workspace)
    typer.echo(backend.plan(sub))
    if recipe:
        typer.echo("--- how it trains\n" + "\n".join(recipe))
    typer.echo(
        f"--- live check: not made (a dry run contacts no host or API and reads no "
        f"credentials); `theseus submit` without --dry-run asks {sub.target} [{target.type}] "
        "first whether it can take the run"
    )
    typer.echo(f"--- bundle: {len(files)} files from {workspace} (not uploaded: dry run)")
    typer.echo(f"--- config.yaml\n{config_yaml}", nl=False)


def _all_secrets(session: Any) -> list[str]:
    return sorted({n for t in session.config.targets.values() for n in t.secrets})


def _refuse_if_active_elsewhere(session: Any, run_name: str, target_name: str) -> None:
    """One run name, one place: a run still active on another target blocks the submit."""
    if not state.exists(run_name):
        return
    record = state.load(run_name)
    other = record.get("target")
    if other == target_name or other not in session.config.targets:
        return
    try:
        current = session.backend(other).status(record["handle"]).state
    except TheseusError:
        return  # unreachable: it cannot be checked; the user sees the new target's answer
    if current in ACTIVE:
        raise TheseusError(
            f"run {run_name} is {current} on target {other}; cancel it or choose another --name"
        )


def _record(sub: Submission, target: Any, handle: dict[str, Any], bundle_sha: str | None) -> None:
    previous = state.load(sub.name) if state.exists(sub.name) else {}
    state.save(
        {
            **sub.record(),
            "type": target.type,
            "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "bundle": bundle_sha or previous.get("bundle"),
            "handle": handle,
        }
    )
