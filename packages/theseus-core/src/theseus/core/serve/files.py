"""How the web view reads a run's files: through :mod:`theseus.core.regular_files` (regular
files only, opened without blocking), with the view's own bounds."""

from __future__ import annotations

from theseus.core.regular_files import (
    MAX_SMALL_FILE,
    MIB,
    NotServed,
    open_regular,
    read_range,
    read_small,
    too_large,
)

MAX_METRICS_FILE = 4096 * MIB  # metrics.jsonl: read once, then only as it grows
METRICS_CHUNK = 64 * MIB  # at most this much of metrics.jsonl is read by one request

__all__ = [
    "MAX_METRICS_FILE",
    "MAX_SMALL_FILE",
    "METRICS_CHUNK",
    "NotServed",
    "open_regular",
    "read_range",
    "read_small",
    "too_large",
]
