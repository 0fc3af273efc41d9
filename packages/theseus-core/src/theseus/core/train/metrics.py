"""Metrics off the critical path: a background thread fetches values and writes JSON lines.

The loop hands over device arrays; the thread turns them into floats (which waits for the
step that produced them, not for the step now running) and appends to ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

log = logging.getLogger(__name__)

# Dense bf16 peak FLOP/s per chip, from the vendors' data sheets.
PEAK_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L4": 121e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
}


def measure_matmul_peak(size: int = 2048, repeats: int = 9) -> float:
    """FLOP/s of a jitted float32 square matmul on the default device: the fastest of
    ``repeats`` timed runs after a warm-up (load from other processes only slows a run, so
    the fastest is the closest to the machine's peak)."""
    import jax.numpy as jnp

    a = jnp.ones((size, size), jnp.float32)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, a).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times)


def machine_key() -> str:
    device = jax.devices()[0]
    return f"{socket.gethostname()}|{device.platform}|{device.device_kind}|{os.cpu_count()}"


def device_peak_flops(configured: float = 0.0, cache_dir: Path | None = None) -> tuple[float, str]:
    """Peak FLOP/s of one device, and where the number came from.

    ``configured`` (``logging.peak_flops``) wins; then the vendors' table; else a measured
    float32 matmul peak, measured once per machine and cached in ``cache_dir`` so that every
    run on the machine divides by the same number.
    """
    if configured > 0:
        return configured, "config"
    kind = jax.devices()[0].device_kind
    for name, flops in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return flops, f"table ({kind})"
    cache = cache_dir / "peak_flops.json" if cache_dir is not None else None
    known = _read_json(cache) if cache is not None else {}
    key = machine_key()
    if key in known:
        return float(known[key]), f"measured f32 matmul ({kind}), cached in {cache}"
    peak = measure_matmul_peak()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: peak}, indent=2) + "\n")
        tmp.replace(cache)
    return peak, f"measured f32 matmul ({kind}, fastest of 9)"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def supersede_rows(path: Path, start: int) -> int:
    """Before a run continues from step ``start``, move the rows it will write again.

    Training rows of steps >= ``start`` and other rows (evaluations) of steps > ``start``
    were written after the checkpoint being resumed, by an attempt that did not reach its
    next checkpoint; they move to ``metrics.superseded.jsonl`` (nothing is deleted), as do
    lines that are not JSON (a write cut by a crash). Returns the number of rows moved.
    """
    if not path.exists():
        return 0
    kept: list[bytes] = []
    moved: list[bytes] = []
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            moved.append(line)
            continue
        redone = step >= start if "train/loss" in row else step > start
        (moved if redone else kept).append(line)
    if not moved:
        return 0
    aside = path.with_name(path.stem + ".superseded.jsonl")
    with aside.open("ab") as out:
        out.writelines(line + b"\n" for line in moved)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(b"".join(line + b"\n" for line in kept))
    os.replace(tmp, path)
    log.info("%d metric rows past step %d moved to %s", len(moved), start, aside.name)
    return len(moved)


class MetricsWriter:
    """Appends one JSON object per record to ``path``; ``write`` never blocks the caller."""

    def __init__(
        self, path: Path, enabled: bool = True, echo: bool = True, loggers: list[Any] | None = None
    ) -> None:
        self.path = path
        self.loggers = loggers or []
        self.enabled = enabled
        self.echo = echo
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain, name="theseus-metrics", daemon=True)
        self.error: BaseException | None = None
        self.last: dict[str, Any] = {}
        if enabled:
            self.thread.start()

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            self.queue.put(record)

    def _drain(self) -> None:
        with self.path.open("a") as out:
            while True:
                record = self.queue.get()
                if record is None:
                    return
                try:
                    plain = {k: _plain(v) for k, v in record.items()}
                    out.write(json.dumps(plain) + "\n")
                    out.flush()
                    self.last = plain
                    for logger in self.loggers:
                        logger.log(plain)
                    if self.echo:
                        log.info(_format(plain))
                except BaseException as error:  # surfaced by close()
                    self.error = error

    def close(self) -> None:
        if self.enabled:
            self.queue.put(None)
            self.thread.join()
        for logger in self.loggers:
            logger.close()
        if self.error:
            raise self.error


def _plain(value: Any) -> Any:
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        value = np.asarray(value).item()
    return value


def _format(record: dict[str, Any]) -> str:
    parts = []
    for key, value in record.items():
        if isinstance(value, float):
            parts.append(f"{key}={value:.4g}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)
