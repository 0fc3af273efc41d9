"""A progress-bar column saying what the loader waits for (data still being tokenized)."""

from __future__ import annotations

from typing import Any

from rich.progress import ProgressColumn, Task
from rich.text import Text


class DataWaitColumn(ProgressColumn):
    """``waiting for bpe8192-...: unit 3 of 12`` while a step waits for its rows, else empty."""

    def __init__(self, data: Any) -> None:
        super().__init__()
        self.data = data

    def render(self, task: Task) -> Text:
        status = getattr(self.data, "status", None)
        return Text(status or "", style="yellow")
