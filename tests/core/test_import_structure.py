"""The import structure of all four packages: no circle between folders nor between files,
type-only imports counted, and the CLI's config and listing commands never start JAX.

A folder is a module's first three dotted parts (``theseus.core.train``,
``theseus.models.layers``; a module directly in a package is its own node, e.g.
``theseus.core.runner``). Imports inside functions count (they run), and so do imports
under ``TYPE_CHECKING``: they never run, but a type checker follows them, and a circle
there is a knot a reader has to untie as well.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    REPO / "packages" / name / "src"
    for name in ("theseus-core", "theseus-models", "theseus-data", "theseus-dispatch")
]


def modules(sources: list[Path] = SOURCES) -> dict[str, Path]:
    """Dotted name -> file of every module the packages under ``sources`` (default: all
    four) ship."""
    found = {}
    for source in sources:
        for path in sorted(source.rglob("*.py")):
            parts = list(path.relative_to(source).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(path: Path, name: str, known: dict[str, Path], type_only: bool = True) -> set[str]:
    """The theseus modules ``name`` imports (functions included); ``type_only``: also those
    imported under ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known and m != name}


def folder(module: str) -> str:
    return ".".join(module.split(".")[:3])


def folder_graph(type_only: bool = True) -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = graph.setdefault(folder(name), set())
        found = imports_of(path, name, known, type_only)
        edges.update(folder(m) for m in found if folder(m) != folder(name))
    return graph


def file_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, name, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the circle it closes."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def test_no_folder_imports_another_that_imports_it_back():
    graph = folder_graph()
    found = circles(graph)
    assert not found, "folder-level import circles: " + "; ".join(" -> ".join(c) for c in found)
    # the walk sees real edges across folders and packages (a broken walker passes vacuously)
    assert "theseus.core.sharding" in graph["theseus.core.train"]
    assert "theseus.core.train" in graph["theseus.models.hf_jobs"]
    # type-only edges are in the graph: the hook specifications type-import their leaf types
    assert "theseus.core.hook_types" in graph["theseus.core.hookspecs"]
    assert "theseus.core.hook_types" not in folder_graph(type_only=False)["theseus.core.hookspecs"]


def test_no_module_imports_another_that_imports_it_back():
    graph = file_graph()
    found = circles(graph)
    assert not found, "file-level import circles: " + "; ".join(" -> ".join(c) for c in found)
    assert "theseus.core.train.recipe" in graph["theseus.core.train.setup"]


def test_the_circle_finder_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]


def test_plugin_packages_import_only_core_and_what_they_declare():
    """theseus-data and theseus-dispatch never import theseus.models (nor each other);
    theseus-models never imports theseus.data or theseus.dispatch."""
    graph = folder_graph()
    core = {"core", "cli", "quick"}  # what theseus-core ships
    allowed = {name: {*core, name} for name in ("models", "data", "dispatch")}
    wrong = [
        f"{node} -> {target}"
        for node, targets in graph.items()
        for target in targets
        if node.split(".")[1] in allowed and target.split(".")[1] not in allowed[node.split(".")[1]]
    ]
    assert not wrong, wrong


JOBS = ["gpt/train/pretrain", "llama/train/sft", "qwen3/train/dpo", "hf/export", "lora/merge"]


@pytest.mark.parametrize("argv", [["jobs"], ["presets", "gpt"], *(["config", key] for key in JOBS)])
def test_listing_jobs_and_printing_configs_never_start_jax(argv):
    """``theseus jobs`` and ``theseus config <job>`` answer from the schemas alone: JAX (and
    torch) stay unimported, so they answer in a fraction of a second on any machine."""
    code = (
        "import sys; from theseus.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as stop:\n    assert not stop.code, stop\n"
        "heavy = sorted(m for m in ('jax', 'torch', 'flax', 'optax') if m in sys.modules)\n"
        "print('IMPORTED', heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IMPORTED []" in done.stdout, done.stdout[-500:]
