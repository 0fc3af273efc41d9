"""The data's own metrics in each record: mixture shares so far and waits for tokenization."""

from __future__ import annotations

from typing import Any

from theseus.core.train.callbacks import Callback
from theseus.core.train.recipe import BatchSource


class DataMetrics(Callback):
    """Adds ``data/mix/<dataset>`` and ``data/wait_s`` (see ``TrainingData.step_metrics``)."""

    def __init__(self, data: BatchSource) -> None:
        self.data = data

    def on_record(self, step: int, record: dict[str, Any]) -> dict[str, Any] | None:
        return self.data.step_metrics(step) or None
