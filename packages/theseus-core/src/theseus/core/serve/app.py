"""The Starlette app: four pages, the JSON API under ``/api/`` and a fixed set of static files.

Pages are static HTML: ``static/frame.html`` (head and navigation) around a page's own
``static/<page>.html``; their scripts read the run names from the URL and ask the API, so no
run name or file content is ever pasted into HTML by the server. The API is documented in
``docs/serve.md``.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from theseus.core.serve.guard import Guard
from theseus.core.serve.root_view import Forbidden, NotFound, RootView

STATIC = resources.files("theseus.core.serve") / "static"
PAGES = {"/": "runs", "/compare": "compare", "/lineage": "lineage", "/runs/{name}": "run"}
PLOTTING = {"compare", "run"}  # the pages that load plotly
STATIC_FILES = {  # name -> media type; nothing else is served from disk
    "style.css": "text/css",
    "common.js": "text/javascript",
    "runs.js": "text/javascript",
    "run.js": "text/javascript",
    "compare.js": "text/javascript",
    "lineage.js": "text/javascript",
}
MAX_COMPARED = 12


def json_safe(value: Any) -> Any:
    """NaN and infinities as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (JSON has
    no such numbers; a diverged run must still be shown, not fail the page)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def answer(payload: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(
        json_safe(payload), status_code=status, headers={"cache-control": "no-store"}
    )


def _int(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise ValueError(f"query parameter {name}={raw!r} is not an integer") from error
    return min(max(value, low), high)


def page_html(name: str) -> str:
    """Page ``name``: its ``<main>`` (``static/<name>.html``) in the frame every page shares,
    titled ``name``, with the shared script, plotly where it plots, and ``<name>.js``."""
    scripts = ["plotly.min.js"] if name in PLOTTING else []
    scripts += ["common.js", f"{name}.js"]
    tags = "\n".join(f'<script src="/static/{script}" defer></script>' for script in scripts)
    frame = (STATIC / "frame.html").read_text(encoding="utf-8")
    main = (STATIC / f"{name}.html").read_text(encoding="utf-8").rstrip("\n")
    return frame.replace("{{title}}", name).replace("{{scripts}}", tags).replace("{{main}}", main)


def create_app(root: str | Path, token: str | None = None) -> Guard:
    view = RootView(root)

    def page(name: str):
        html = page_html(name)

        async def endpoint(request: Request) -> Response:
            return HTMLResponse(html)

        return endpoint

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(_plotly_js(), media_type="text/javascript")
        if name not in STATIC_FILES:
            return answer({"error": f"no static file {name!r}"}, 404)
        return FileResponse(str(STATIC / name), media_type=STATIC_FILES[name])

    def api(handler):
        async def endpoint(request: Request) -> Response:
            try:
                return answer(await run_in_threadpool(handler, request))
            except NotFound as error:
                return answer({"error": str(error)}, 404)
            except Forbidden as error:
                return answer({"error": str(error)}, 403)
            except ValueError as error:
                return answer({"error": str(error)}, 400)

        return endpoint

    def runs(request: Request) -> Any:
        return {"root": str(view.root), "runs": view.runs()}

    def run(request: Request) -> Any:
        return view.run(request.path_params["name"])

    def metrics(request: Request) -> Any:
        return view.metrics_since(
            request.path_params["name"],
            offset=_int(request, "offset", 0, 0, 2**62) or 0,
            since=_int(request, "since", None, -1, 2**62),
            version=request.query_params.get("version", ""),
        )

    def series(request: Request) -> Any:
        return view.series(
            request.path_params["name"],
            request.query_params.getlist("metric"),
            _int(request, "max_points", 4000, 100, 10_000_000) or 4000,
        )

    def config(request: Request) -> Any:
        return view.config(request.path_params["name"])

    def log(request: Request) -> Any:
        return view.log_tail(
            request.path_params["name"], _int(request, "lines", 200, 1, 5000) or 200
        )

    def diff(request: Request) -> Any:
        names = request.query_params.getlist("runs")
        if len(names) < 2 or len(names) > MAX_COMPARED:
            raise ValueError(f"diff needs 2 to {MAX_COMPARED} runs (?runs=A&runs=B)")
        return view.diff(names)

    def lineage(request: Request) -> Any:
        return view.lineage()

    routes = [Route(path, page(name)) for path, name in PAGES.items()]
    routes += [
        Route("/static/{name}", static),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/runs", api(runs)),
        Route("/api/runs/{name}", api(run)),
        Route("/api/runs/{name}/metrics", api(metrics)),
        Route("/api/runs/{name}/series", api(series)),
        Route("/api/runs/{name}/config", api(config)),
        Route("/api/runs/{name}/log", api(log)),
        Route("/api/diff", api(diff)),
        Route("/api/lineage", api(lineage)),
    ]
    return Guard(Starlette(routes=routes), token)


def _plotly_js() -> str:
    """plotly.js as the plotly wheel ships it (nothing is fetched from the internet)."""
    import plotly

    return str(Path(plotly.__file__).parent / "package_data" / "plotly.min.js")
