"""``theseus``: list, configure and run jobs. Plugins add commands through a hook.

Nothing on the paths of ``theseus jobs``, ``plugins``, ``config``, ``--help`` or shell
completion imports JAX.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from theseus.core.chips.environment import default_to_cpu
from theseus.core.console import background_note, install
from theseus.core.environment import explain
from theseus.core.errors import JobError, TheseusError
from theseus.core.jobs import Job
from theseus.core.plugins import registries

app = typer.Typer(
    name="theseus",
    help="Train language models with JAX: jobs by key, strict typed configs, plugins.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def complete_job_key(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of job keys: (key, description) of those starting with ``incomplete``.

    Reads the registries only (plugins describe their jobs without importing JAX); a
    broken plugin setup completes nothing rather than printing into the shell.
    """
    try:
        jobs = _registries().jobs
        return [(key, spec.description) for key, spec in jobs.items() if key.startswith(incomplete)]
    except Exception:
        return []


def complete_override(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of the config keys of the job on the line, as ``key=``."""
    if "=" in incomplete:
        return []
    try:
        from theseus.core.config import ConfigTree
        from theseus.core.runner import job_spec

        regs = _registries()
        tree = ConfigTree(job_spec(ctx.params.get("job") or "", regs), regs)
        return [
            (f"{row['key']}=", f"{row['type']}: {row['help']}")
            for row in tree.describe()
            if row["key"].startswith(incomplete)
        ]
    except Exception:
        return []


JobKey = Annotated[
    str,
    typer.Argument(help="job key, e.g. gpt/train/pretrain", autocompletion=complete_job_key),
]
Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="config overrides, key=value (after the --config files)",
        autocompletion=complete_override,
    ),
]
ConfigFiles = Annotated[
    list[str] | None,
    typer.Option(
        "--config",
        "-c",
        help="YAML config file (nested or dotted keys); repeat to merge left to right",
    ),
]
RootOption = Annotated[
    str | None, typer.Option("--root", help="root directory (default $THESEUS_ROOT, else ./runs)")
]


def _registries():
    return registries()


@app.command()
def jobs(prefix: Annotated[str, typer.Argument(help="only keys starting with this")] = "") -> None:
    """List registered jobs with one-line descriptions."""
    from rich.console import Console
    from rich.table import Table

    table = Table("job", "description", "plugin", box=None, pad_edge=False)
    regs = _registries()
    for key, spec in regs.jobs.items():
        if key.startswith(prefix):
            table.add_row(key, spec.description, regs.jobs.owner(key).name)
    Console(width=200).print(table)


@app.command()
def presets(
    model: Annotated[
        str, typer.Argument(help="a model (gpt, llama, ...): its presets' values")
    ] = "",
) -> None:
    """List the size presets of each model (model.preset=NAME), or what one model's set."""
    from rich.console import Console
    from theseus.cli.presets import presets_table

    Console().print(presets_table(_registries(), model))


@app.command()
def plugins() -> None:
    """List plugins: distribution, version and what each registers (a line per kind,
    wrapped to the terminal's width; 80 columns, or $COLUMNS, when not a terminal)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("plugin", "distribution", "version", "registers", box=None, pad_edge=False)
    table.columns[3].overflow = "fold"  # a name longer than the column is cut, not lost
    for info in _registries().plugins:
        if info.error:
            what = Text(f"failed: {info.error}", style="red")
        else:
            kinds = [
                f"{kind}: {', '.join(sorted(names))}" for kind, names in info.registered.items()
            ]
            what = Text("\n".join(kinds) or "-")
        table.add_row(info.name, info.distribution, info.version, what)
    Console().print(table)


@app.command()
def config(
    job: JobKey,
    overrides: Overrides = None,
    configs: ConfigFiles = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of YAML")] = False,
    save: Annotated[
        str | None,
        typer.Option("--save", help="write the resolved config to this YAML file, to run with"),
    ] = None,
) -> None:
    """Print a job's resolved config with each key's type and help (or --save it)."""
    from theseus.core.runner import config_for, job_spec

    regs = _registries()
    tree = config_for(job_spec(job, regs), regs, overrides or [], configs=configs or [])
    tree.check()  # what `run` refuses (a model that cannot be built) is refused here too
    if save is not None:
        path = Path(save)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = (
            f"# {job}: the resolved config, each key with its type and help.\n"
            f"# Run it with:  theseus run {job} --config {save} [key=value ...]\n"
        )
        path.write_text(header + tree.annotated_yaml(), encoding="utf-8")
        typer.echo(f"wrote {path} (theseus run {job} --config {save})")
    elif as_json:
        rows = tree.describe()
        for row in rows:
            if row["value"] == "???":
                row["value"] = None
                row["required"] = True
        typer.echo(json.dumps(rows, indent=2, default=str))
    else:
        typer.echo(tree.annotated_yaml(), nl=False)


RUN_EXAMPLES = """\
Examples, in this order in an empty folder (each runs as written):
  theseus config gpt/train/pretrain model.preset=tiny data.tokenizer=byte \\
      data.max_documents=100 training.total_steps=10 --save tiny.yaml
  theseus run gpt/train/pretrain -c tiny.yaml --dry-run  # config, plan
  theseus run gpt/train/pretrain -c tiny.yaml
  theseus run gpt/train/pretrain training.total_steps=20 \\
      training.schedule_on_resume=stretch  # the same run: resumed, longer
  theseus run gpt/train/pretrain --name low-lr \\
      --branch gpt-train-pretrain@10 optimizer.learning_rate=3e-4
  theseus run gpt/train/pretrain -c tiny.yaml --fresh  # start it over
"""


@app.command(epilog=RUN_EXAMPLES)
def run(
    job: JobKey,
    overrides: Overrides = None,
    configs: ConfigFiles = None,
    root: RootOption = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="run name (default: the key's, so training resumes; one-shot jobs such as "
            "hf/export, generate and evaluate get <key>-<UTC time>)",
        ),
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="start over instead of resuming")] = False,
    branch: Annotated[
        str | None,
        typer.Option(
            "--branch", help="start a new run from a checkpoint: RUN (its latest) or RUN@STEP"
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="resolve, plan and report memory; run nothing (the config as given: a run "
            "of that name is neither read nor resumed)",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="with --dry-run: print the plan as one JSON object")
    ] = False,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="with --dry-run: compile for these chips, from any machine: v5p-8, v5p-64, "
            "v5litepod-16, v6e-8, h100x8, h200x8, b200x8, h100x16 (needs the aot extra)",
        ),
    ] = None,
) -> None:
    """Run a job (its missing prerequisites first) in a run directory under the root.

    The config is the job's defaults, then the --config files left to right, then the
    key=value overrides. A run that exists already resumes, with its saved config as the
    base: files and overrides then act as changes, checked for what a resume may change.
    """
    if target and not dry_run:
        raise JobError(f"--target {target} plans a run for those chips: add --dry-run")
    from theseus.core.runner import prepare

    prepared = prepare(
        job,
        overrides or [],
        root=root,
        name=name,
        fresh=fresh,
        branch=branch,
        configs=configs or [],
        dry_run=dry_run,
    )
    if dry_run:
        _dry_run(prepared, as_json, target)
        return
    prepared()
    typer.echo(f"run {prepared.name}: {prepared.run_dir.path.resolve()}")


def _dry_run(prepared, as_json: bool, target: str | None = None) -> None:
    """The resolved config with types and help, then the job's own plan (if it has one)."""
    if as_json or target:  # the job's plan alone (one JSON object with --json)
        prepared.dry_run(as_json, target)
        return

    job_class = prepared.spec.load()
    prepared.typed_config(job_class)  # missing or invalid values are errors here already
    typer.echo(prepared.tree.annotated_yaml(), nl=False)
    if getattr(job_class.dry_run, "__func__", None) is not getattr(Job.dry_run, "__func__", None):
        typer.echo("")
        prepared.dry_run(False, target)


def _add_plugin_commands() -> None:
    try:
        regs = _registries()
    except TheseusError:
        return
    for name, command in regs.commands.items():
        if isinstance(command, typer.Typer):
            app.add_typer(command, name=name)
        else:
            app.command(name=name)(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors with exit code 2; ``-v`` shows the traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in args)
    args = [a for a in args if a not in ("-v", "--verbose")]
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s" if verbose else "%(message)s",
    )
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its font cache, built once
    default_to_cpu()  # the aot extra's compilers on a machine without accelerators: quiet CPU

    console, restore = (None, lambda: None) if verbose else install(_console_handler())
    from theseus.core import stop

    stop.interrupt_on_signals()  # outside a job's own stop points: as Ctrl-C (core/stop.py)
    try:
        _add_plugin_commands()
        code = app(args=args, prog_name="theseus", standalone_mode=False)
        if code == 130:  # Typer turns a KeyboardInterrupt into this exit code, returned
            raise KeyboardInterrupt
        if isinstance(code, int) and code:  # a command's typer.Exit(code), returned too
            sys.exit(code)
        _note(console)
    except TheseusError as error:
        if verbose:
            traceback.print_exc()
        _note(console, error)  # before the error: the error line stays the last one
        typer.echo(f"error: {error}", err=True)
        _exit_quietly(error.exit_code, verbose)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except KeyboardInterrupt:
        typer.echo(f"stopped by {stop.last_signal()} before it finished", err=True)
        sys.exit(stop.interrupted_exit_code())
    except Exception as error:  # usage errors of Typer's (vendored) click
        if hasattr(error, "show") and hasattr(error, "exit_code"):
            error.show()
            sys.exit(error.exit_code)
        if type(error).__name__ == "Abort":
            sys.exit(130)

        problem = explain(error)  # a full disk, a read-only root: one line, exit 2
        if problem is None:
            restore()  # Python prints this uncaught error of the command itself
            _note(console)
            raise
        if verbose:
            traceback.print_exc()
        typer.echo(f"error: {problem}", err=True)
        _exit_quietly(2, verbose)


def _console_handler() -> logging.Handler:
    """The handler ``logging.basicConfig`` gave the root logger (the terminal)."""
    handlers = logging.getLogger().handlers
    streams = [h for h in handlers if type(h) is logging.StreamHandler]
    return streams[0] if streams else handlers[0]


def _note(console, error: BaseException | None = None) -> None:
    """The one line saying that background exceptions went to the run's log, if any."""
    if console is None or (error is not None and explain(error) is not None):
        return
    note = background_note(console)
    if note:
        typer.echo(note, err=True)


def _exit_quietly(code: int, verbose: bool) -> None:
    """Exit after a one-line error: logs flushed, and (without ``-v``) nothing more on
    stderr, where threads of failed reads (Orbax's TensorStore callbacks) would otherwise
    print tracebacks as the interpreter shuts down."""
    if verbose:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os._exit(code)


if __name__ == "__main__":
    main()
