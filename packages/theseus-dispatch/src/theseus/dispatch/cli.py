"""``theseus submit / status / logs / cancel``. Heavy imports stay inside the commands."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any, TextIO

import typer
from theseus.core.errors import TheseusError
from theseus.core.plugins import registries
from theseus.dispatch import state

ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--dispatch-config", help="dispatch config (default ~/.config/theseus/dispatch.yaml)"
    ),
]


class RedactedStream:
    """A text stream that passes on what it is given as the one redaction rule shows it
    (:class:`theseus.core.redaction.LineRedactor`), line by line as the lines end."""

    def __init__(self, out: TextIO) -> None:
        from theseus.core.redaction import LineRedactor

        self.out = out
        self.redactor = LineRedactor()

    def write(self, text: str) -> int:
        self.out.write(self.redactor.feed(text))
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.write(self.redactor.flush())
        self.out.flush()


class Session:
    """The dispatch config plus one backend object per target used (closed at the end)."""

    def __init__(self, config_path: str | None) -> None:
        from theseus.dispatch import config

        self.registries = registries()
        kinds = self.registries.dispatch_targets
        schemas = {name: component.config for name, component in kinds.items()}
        self.config = config.load(config_path, schemas)
        self._backends: dict[str, Any] = {}

    def backend(self, name: str) -> Any:
        if name not in self.config.targets:
            raise TheseusError(f"target {name!r} is not in {self.config.path} (any more)")
        if name not in self._backends:
            target = self.config.targets[name]
            cls = self.registries.dispatch_targets.get(target.type).load()
            self._backends[name] = cls(name, target)
        return self._backends[name]

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def submit(
    job: Annotated[str, typer.Argument(help="job key, e.g. gpt/train/pretrain")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="config overrides, key=value")
    ] = None,
    to: Annotated[str, typer.Option("--to", help="target name, or auto (priority order)")] = "auto",
    chips: Annotated[int | None, typer.Option("--chips", help="accelerators in total")] = None,
    chip: Annotated[str | None, typer.Option("--chip", help="accelerator type")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="nodes (hosts)")] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="run name (default: from the key)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan; touch nothing")
    ] = False,
    dispatch_config: ConfigOption = None,
) -> None:
    """Run a job on a configured target (SSH hosts, SLURM, Volcano, TPU VMs)."""
    from theseus.dispatch.submit import submit_run

    with Session(dispatch_config) as session:
        submit_run(
            session,
            job,
            list(overrides or []),
            to=to,
            chips=chips,
            chip=chip,
            nodes=nodes,
            name=name,
            dry_run=dry_run,
        )


def status(
    run: Annotated[
        str | None, typer.Argument(help="run name (default: every submitted run)")
    ] = None,
    dispatch_config: ConfigOption = None,
) -> None:
    """Show where submitted runs are and what state they are in."""

    names = [run] if run else state.names()
    if not names:
        typer.echo("no submitted runs")
        return
    with Session(dispatch_config) as session:
        for name in names:
            record = state.load(name)
            try:
                result = session.backend(record["target"]).status(record["handle"])
                line = f"{result.state}"
                if result.run_status:
                    again = f", attempt {result.attempts}" if (result.attempts or 0) > 1 else ""
                    line += f" (run: {result.run_status}{again})"
                if result.detail:
                    line += f" [{result.detail}]"
            except TheseusError as error:
                if run:
                    raise
                line = f"unreachable: {error}"
            typer.echo(f"{name}  {record['target']}  {record['job']}  {line}")


def logs(
    run: Annotated[str, typer.Argument(help="run name")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until it ends")
    ] = False,
    dispatch_config: ConfigOption = None,
) -> None:
    """Print a submitted run's log (process 0), credentials redacted."""

    record = state.load(run)
    shown = RedactedStream(sys.stdout)
    with Session(dispatch_config) as session:
        try:
            session.backend(record["target"]).logs(record["handle"], follow, shown)
        finally:
            shown.close()


def cancel(
    run: Annotated[str, typer.Argument(help="run name")],
    dispatch_config: ConfigOption = None,
) -> None:
    """Stop a submitted run on its target."""

    record = state.load(run)
    with Session(dispatch_config) as session:
        detail = session.backend(record["target"]).cancel(record["handle"])
    record["cancelled"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    state.save(record)
    typer.echo(f"cancelled run {run} on {record['target']}: {detail}")
