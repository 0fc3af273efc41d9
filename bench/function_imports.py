"""Count the imports of theseus modules made inside function bodies, over the four packages.

An import statement (``import theseus...`` or ``from theseus... import ...``) anywhere inside
a ``def`` counts once; module-level ones (``TYPE_CHECKING`` blocks included) do not. Such an
import keeps a heavy module (JAX) out of a cheap one's import, or breaks an import circle;
any other belongs at the top of its module.

    uv run python bench/function_imports.py          # the count
    uv run python bench/function_imports.py --list   # every one, file:line
    uv run python bench/function_imports.py --root DIR   # another checkout's
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("theseus-core", "theseus-models", "theseus-data", "theseus-dispatch")


def names_theseus(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "theseus"
    return any(alias.name.split(".")[0] == "theseus" for alias in node.names)


def function_imports(path: Path) -> list[int]:
    """Line numbers of the theseus imports inside the functions of ``path``."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom) and names_theseus(inner):
                    lines.add(inner.lineno)  # a nested function's are found once
    return sorted(lines)


def every_function_import(root: Path = REPO) -> list[tuple[Path, int]]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / "packages" / package / "src").rglob("*.py")):
            found += [(path.relative_to(root), line) for line in function_imports(path)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every one, file:line")
    parser.add_argument("--root", type=Path, default=REPO, help="a checkout (default: this one)")
    args = parser.parse_args()
    found = every_function_import(args.root)
    if args.list:
        for path, line in found:
            print(f"{path}:{line}")
    print(f"{len(found)} function-level imports of theseus modules")


if __name__ == "__main__":
    main()
