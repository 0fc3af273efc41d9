"""CLI commands for looking at runs: ``runs``, ``show``, ``plot``, ``inspect``.

Registered by core's plugin through the same ``theseus_register_commands`` hook as any
third-party command. Heavy imports stay inside the functions. They only read a run: a
damaged file is flagged or skipped with one line naming it, or, when the command cannot do
what was asked without it, is a one-line error (exit 2).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from theseus.core.errors import TheseusError

RootOption = Annotated[
    str | None, typer.Option("--root", help="root directory (default $THESEUS_ROOT, else ./runs)")
]


def _root(root: str | None) -> str:
    from theseus.core.runner import default_root

    return root or default_root()


def runs(
    root_dir: Annotated[str | None, typer.Argument(help="root directory")] = None,
    root: RootOption = None,
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="only runs of this kind: train, data, export, import, generate, evaluate, "
            "merge, ... (the job key's last word)",
        ),
    ] = "",
) -> None:
    """Table of runs, trainings first: job, status, step, last loss, parent, start time."""
    from rich.console import Console
    from rich.table import Table
    from theseus.core.inspect.runs import run_summaries, sorted_for_listing

    summaries = run_summaries(_root(root_dir or root))  # a damaged run: a row and a warning
    shown = sorted_for_listing(summaries, kind)
    if kind and not shown:
        kinds = sorted({s["kind"] for s in summaries if s.get("kind")})
        raise TheseusError(
            f"--kind {kind}: no run of that kind under {_root(root_dir or root)} "
            f"(kinds there: {', '.join(kinds) or 'none'})"
        )
    table = Table("run", "job", "status", "step", "loss", "parent", "started", box=None)
    for s in shown:
        loss = f"{s['loss']:.4f}" if s["loss"] is not None else None
        cells = (s["name"], s["key"], s["status"], s["step"], loss, s["parent"], s["started"])
        table.add_row(*("-" if c is None else str(c) for c in cells))
    Console(width=200).print(table)


def show(run: Annotated[str, typer.Argument(help="run name")], root: RootOption = None) -> None:
    """A run's config, lineage, checkpoints and final metrics (credentials redacted)."""
    from theseus.core.inspect.runs import run_details
    from theseus.core.redaction import redact_config_text

    details = run_details(_root(root), run)
    record = details["record"]
    typer.echo(f"run {run}: {record.get('key')} [{record.get('status')}]")
    typer.echo(f"lineage: {' <- '.join([run, *details['lineage']])}")
    typer.echo(f"checkpoints: {', '.join(map(str, details['checkpoints'])) or 'none'}")
    typer.echo("final metrics: " + json.dumps(details["final_metrics"], sort_keys=True))
    typer.echo("config:")
    typer.echo("  " + redact_config_text(details["config"]).replace("\n", "\n  ").rstrip())


def plot(
    runs: Annotated[list[str], typer.Argument(help="runs to compare")],
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="metric to plot (repeatable; default train/loss)"),
    ] = None,
    out: Annotated[
        str, typer.Option("--out", help="output image path (missing folders are created)")
    ] = "plot.png",
    smoothing: Annotated[float, typer.Option("--smoothing", help="EMA weight in [0, 1)")] = 0.0,
    root: RootOption = None,
) -> None:
    """Plot metrics of one or more runs into one figure."""
    from theseus.core.inspect.plot import plot_runs

    path = plot_runs(_root(root), runs, metric or ["train/loss"], out, smoothing)
    typer.echo(f"wrote {path}")


def _shapes(output: object) -> str:
    import jax

    shapes = [tuple(x.shape) for x in jax.tree.leaves(output) if hasattr(x, "shape")]
    return " ".join(str(s) for s in shapes) or "-"


def inspect(
    run: Annotated[str, typer.Argument(help="run name")],
    step: Annotated[int, typer.Option("--step", help="a checkpointed step")],
    list_modules: Annotated[
        bool, typer.Option("--list", help="list module paths with shapes")
    ] = False,
    module: Annotated[
        list[str] | None, typer.Option("--module", help="module path to capture")
    ] = None,
    out: Annotated[
        str,
        typer.Option("--out", help="where to write captured arrays (.npz; folders are created)"),
    ] = "acts.npz",
    replay: Annotated[bool, typer.Option("--replay", help="recompute the step's loss")] = False,
    root: RootOption = None,
) -> None:
    """Time travel: restore a run at a step, replay it, capture module activations."""
    import jax
    import numpy as np
    from theseus.core.inspect.plot import writable
    from theseus.core.inspect.timetravel import open_step

    out_path = writable(out) if module else None  # before the restore, which takes a while
    moment = open_step(_root(root), run, step)
    if replay:
        result = moment.replay()
        typer.echo(f"step {step}: loss {result['loss']!r} grad_norm {result['grad_norm']!r}")
    if list_modules:
        captures = moment.capture()
        for path, capture in captures.items():
            typer.echo(
                f"{path}  {capture.type}  {_shapes(capture.output) if capture.calls else '-'}"
            )
    if module and out_path is not None:
        captures = moment.capture(list(module))
        arrays = {}
        for path, capture in captures.items():
            for i, arg in enumerate(capture.args):
                if hasattr(arg, "shape"):
                    arrays[f"{path}/input{i}"] = np.asarray(arg)
            leaves = jax.tree.leaves(capture.output)
            for i, leaf in enumerate(leaf for leaf in leaves if hasattr(leaf, "shape")):
                arrays[f"{path}/output{i if len(leaves) > 1 else ''}"] = np.asarray(leaf)
        try:
            np.savez(out_path, allow_pickle=False, **arrays)
        except OSError as error:
            raise TheseusError(f"cannot write {out}: {error.strerror or error}") from error
        typer.echo(f"wrote {out}: " + ", ".join(f"{k} {v.shape}" for k, v in arrays.items()))
