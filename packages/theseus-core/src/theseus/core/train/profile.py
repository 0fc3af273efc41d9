"""``logging.profile_steps=START:END``: a ``jax.profiler`` trace of steps START..END-1.

The trace lands in ``<run>/profile/`` (TensorBoard's profile plugin or Perfetto open it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from theseus.core.errors import ConfigError
from theseus.core.train.callbacks import Callback


def parse_steps(text: str) -> tuple[int, int] | None:
    """``"START:END"`` -> ``(START, END)``; ``""`` -> None (no profiling)."""
    if not text:
        return None
    first, sep, last = text.partition(":")
    try:
        start, end = int(first), int(last)
    except ValueError:
        start, end = -1, -1
    if not sep or start < 0 or end <= start:
        raise ConfigError(
            f"logging.profile_steps={text!r}: expected START:END with 0 <= START < END, e.g. 5:8"
        )
    return start, end


class StepProfiler(Callback):
    """Starts the trace before step START, stops it once step END-1 has finished."""

    def __init__(self, spec: str, directory: Path) -> None:
        self.steps = parse_steps(spec)
        self.directory = directory
        self.active = False

    def before_step(self, step: int) -> None:
        if self.steps and not self.active and self.steps[0] <= step < self.steps[1]:
            import jax

            self.directory.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.directory))
            self.active = True

    def on_step(self, step: int, state: Any, metrics: dict) -> None:
        if self.active and self.steps and step + 1 >= self.steps[1]:
            self.stop(metrics)

    def close(self) -> None:
        self.stop()

    def stop(self, outputs: Any = None) -> None:
        if self.active:
            import jax

            jax.block_until_ready(outputs)  # the traced steps have run, not just dispatched
            jax.profiler.stop_trace()
            self.active = False
