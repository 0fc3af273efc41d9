"""A progress bar for tokenization: documents/s, MB/s and tokens so far."""

from __future__ import annotations

import time

from rich.progress import (
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text
from theseus.core.console import progress_console


class _Rates(ProgressColumn):
    def __init__(self, meter: TokenizeMeter) -> None:
        super().__init__()
        self.meter = meter

    def render(self, task: Task) -> Text:
        return Text(self.meter.line())


class TokenizeMeter:
    """Counts documents, bytes and tokens; renders as a rich progress line."""

    def __init__(self, description: str) -> None:
        self.documents = 0
        self.bytes = 0
        self.tokens = 0
        self.units_done = 0  # tokenized by this run (not resumed)
        self.workers: set[int] = set()  # pids of the worker processes that did them
        self.start = time.perf_counter()
        console = progress_console()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn(description),
            _Rates(self),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,  # the job logs the same counts when it ends
        )
        self.task = self.progress.add_task(description, total=None)

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return (
            f"{self.documents:,} docs ({self.documents / elapsed:,.0f} docs/s)  "
            f"{self.bytes / 1e6:,.1f} MB ({self.bytes / 1e6 / elapsed:,.2f} MB/s)  "
            f"{self.tokens:,} tokens"
        )

    def add(self, documents: int, num_bytes: int, tokens: int) -> None:
        self.documents += documents
        self.bytes += num_bytes
        self.tokens += tokens
        self.progress.update(self.task, advance=documents)

    def __enter__(self) -> TokenizeMeter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
