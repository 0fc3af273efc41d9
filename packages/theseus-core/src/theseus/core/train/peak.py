"""The peak MFU divides by: never below what the run itself achieves.

A measured CPU peak depends on the load at the moment it was measured (4.44e10 FLOP/s in
one root, 8.79e10 in another on the same machine), and a peak measured under load made MFU
read up to 6.22. The peak used here is, by construction, at least the FLOP rate the run
achieves: when a window of steps runs faster than the peak allows, the peak is raised to
that rate (logged once; a measured peak is also raised in the root's cache, so later runs
start from it). MFU is then at most 1 whatever the load when the peak was measured.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class Peak:
    """Peak FLOP/s of all the run's devices, raised to any rate the run is seen to reach."""

    def __init__(
        self, per_device: float, source: str, devices: int, cache_dir: Path | None = None
    ) -> None:
        self.per_device = per_device
        self.source = source
        self.devices = max(devices, 1)
        self.cache_dir = cache_dir
        self.raised = False

    @property
    def total(self) -> float:
        return self.per_device * self.devices

    def mfu(self, achieved: float) -> float:
        """``achieved`` FLOP/s (all devices) over the peak, which is first raised to
        ``achieved`` if it is below: the result is in (0, 1]."""
        if achieved > self.total:
            self._raise(achieved / self.devices)
        return achieved / self.total

    def _raise(self, per_device: float) -> None:
        if not self.raised:
            log.warning(
                "the run reaches %.3g FLOP/s per device, above the peak of %.3g (%s): MFU "
                "divides by the rate reached from now on",
                per_device,
                self.per_device,
                self.source,
            )
        self.raised = True
        self.per_device = per_device
        if self.source.startswith("measured") and self.cache_dir is not None:
            remember_peak(self.cache_dir, per_device)


def remember_peak(cache_dir: Path, per_device: float) -> None:
    """Raise this machine's cached measured peak to ``per_device`` (never lower it)."""
    from theseus.core.train.metrics import machine_key

    cache = cache_dir / "peak_flops.json"
    try:
        known = json.loads(cache.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    key = machine_key()
    if float(known.get(key, 0.0)) >= per_device:
        return
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**known, key: per_device}, indent=2) + "\n")
        tmp.replace(cache)
    except OSError as error:  # a cache, not a record: the run goes on
        log.debug("cannot update %s: %s", cache, error)
