"""The peak MFU divides by, robust to a mistimed window and never written back.

A measured CPU peak depends on the load at the moment it was measured (4.44e10 FLOP/s in
one root, 8.79e10 in another on the same machine), and a peak measured under load made MFU
read up to 6.22. MFU is therefore clipped to 1. A measured peak is raised during a run only
when the median of its last ``WINDOWS`` windows above it is above it: one window timed too
short (0.0085 s once gave 12x the machine's rate) moves nothing. The raise lives in the run
alone; the root's cached measurement is never changed by a run (before, one mistimed window
raised it for good, and every later run in the root reported MFU near 0.08).
"""

from __future__ import annotations

import logging
import statistics

log = logging.getLogger(__name__)

WINDOWS = 5  # windows above the peak whose median may raise a measured peak


class Peak:
    """Peak FLOP/s of all the run's devices; a measured one is raised to the median of the
    run's last ``WINDOWS`` windows above it."""

    def __init__(self, per_device: float, source: str, devices: int) -> None:
        self.per_device = per_device
        self.source = source
        self.devices = max(devices, 1)
        self.above: list[float] = []  # per-device rates of the windows above the peak
        self.warned = False

    @property
    def total(self) -> float:
        return self.per_device * self.devices

    def mfu(self, achieved: float) -> float:
        """``achieved`` FLOP/s (all devices) over the peak, at most 1."""
        per_device = achieved / self.devices
        if per_device > self.per_device:
            self.above.append(per_device)
            self._warn_once(per_device)
            recent = self.above[-WINDOWS:]
            if self.source.startswith("measured") and len(recent) == WINDOWS:
                self.per_device = max(self.per_device, statistics.median(recent))
        return min(achieved / self.total, 1.0)

    def _warn_once(self, per_device: float) -> None:
        if not self.warned:
            log.warning(
                "a window reached %.3g FLOP/s per device, above the peak of %.3g (%s): MFU "
                "is clipped to 1%s",
                per_device,
                self.per_device,
                self.source,
                f"; the peak is raised to the median of {WINDOWS} such windows"
                if self.source.startswith("measured")
                else "",
            )
        self.warned = True
