"""``theseus serve``: bind, print the URL, serve until Ctrl-C."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Annotated

import typer
from theseus.core.errors import TheseusError
from theseus.core.inspect.commands import RootOption

FEATURE = "theseus serve"
EXTRA = "theseus-core[serve]"
TOKEN_ENV = "THESEUS_SERVE_TOKEN"


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise TheseusError(
            f"--host {host}: cannot resolve it ({error.strerror or error})"
        ) from error
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        raise TheseusError(
            f"cannot listen on {host}:{port}: {error.strerror or error} "
            "(--port 0 picks a free port)"
        ) from error
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, host: str, token: str | None) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = socket.gethostname()
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(
    root: RootOption = None,
    host: Annotated[
        str, typer.Option("--host", help="address to bind (not loopback: --token is required)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="port (0: a free one)")] = 0,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help=f"required on every request ('auto' makes one; default ${TOKEN_ENV})",
            show_default=False,
        ),
    ] = None,
) -> None:
    """A read-only web view of the root's runs: live curves, config diffs, lineage."""
    from theseus.core.requirements import require

    for module in ("starlette", "uvicorn", "plotly"):
        require(module, FEATURE, package=EXTRA)
    import uvicorn
    from theseus.core.runner import default_root
    from theseus.core.serve.app import create_app
    from theseus.core.serve.guard import check_binding

    root_path = Path(root or default_root()).expanduser()
    if not root_path.is_dir():
        raise TheseusError(f"--root {root_path} is not a directory")
    token = token or os.environ.get(TOKEN_ENV) or None
    if token == "auto":
        token = secrets.token_urlsafe(24)
    check_binding(host, token)
    # the pages show damaged runs as damaged; a warning per poll would flood the terminal
    logging.getLogger("theseus.core.inspect.runs").setLevel(logging.ERROR)
    sock = _bind(host, port)

    class AnnouncedServer(uvicorn.Server):
        """Prints the URL once serving: by then uvicorn holds SIGTERM and SIGINT, so a
        signal sent on seeing the URL stops it cleanly (before, it could land between
        the event loop's start and uvicorn's handlers)."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            typer.echo(f"theseus serve: {root_path.resolve()} at {url_of(sock, host, token)}")
            typer.echo("(read-only; Ctrl-C stops it)")

    try:
        config = uvicorn.Config(
            create_app(root_path, token), log_level="warning", access_log=False, lifespan="off"
        )
        AnnouncedServer(config).run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (uvicorn stops, then passes it on)
        from theseus.core import stop

        typer.echo(f"theseus serve: stopped ({stop.last_signal()})")
