"""``python-stdlib``: the installed Python standard library's source, a corpus every
machine with Python has (~11 MB without the test suites), in sorted path order."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from theseus.core.components import option
from theseus.data.datasets.base import Dataset

EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib"}


@dataclass
class StdlibConfig:
    max_documents: int = option(0, "use at most this many files (0: all)", ge=0)
    include_tests: bool = option(False, "also include the standard library's test suites")


def stdlib_files(include_tests: bool = False) -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    excluded = EXCLUDED_DIRS - ({"test", "tests"} if include_tests else set())
    files: list[Path] = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in excluded]
        files.extend(Path(directory) / n for n in names if n.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


class PythonStdlib(Dataset):
    kind = "text"

    def records(self) -> Iterator[str]:
        def texts() -> Iterator[str]:
            for path in stdlib_files(self.config.include_tests):
                text = path.read_text(encoding="utf-8", errors="replace")
                if text.strip():
                    yield text

        return self.limit(texts())
