"""What a dispatch backend implements. Register one with
``theseus_register_dispatch_targets``: ``Component(name, config=<dataclass>, target="m:Class")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

from theseus.dispatch.bootstrap import Submission
from theseus.dispatch.bundle import Bundle

# states a backend reports for a run
PENDING, STARTING, RUNNING = "pending", "starting", "running"
FINISHED, FAILED, CANCELLED, UNKNOWN = "finished", "failed", "cancelled", "unknown"
PREEMPTED = "preempted"  # the job saved a checkpoint and exited 3: resubmit to resume
ACTIVE = (PENDING, STARTING, RUNNING)


@dataclass
class Request:
    """What ``theseus submit`` asks for: chips in total, of a type, over nodes."""

    chips: int | None = None
    chip: str | None = None
    nodes: int | None = None


@dataclass
class Status:
    state: str
    detail: str = ""
    run_status: str | None = None  # the status in the remote run's job.json
    attempts: int | None = None  # how many times the run was started (its job.json)


class Backend:
    """One configured target. Methods raise DispatchError with a one-line reason."""

    def __init__(self, name: str, config: Any) -> None:
        self.name = name
        self.config = config

    def available(self, request: Request, nodes: int) -> str | None:
        """Live check: None when the target can take the run now, else why not."""
        return None

    def plan(self, sub: Submission) -> str:
        """What would be launched (script or manifest), for ``--dry-run``."""
        raise NotImplementedError

    def launch(self, sub: Submission, bundle: Bundle, secrets: dict[str, str]) -> dict[str, Any]:
        """Start the run; return the handle stored locally. All-or-nothing."""
        raise NotImplementedError

    def find(self, sub: Submission) -> dict[str, Any] | None:
        """The handle of this run on the target when it is already there (idempotency)."""
        return None

    def status(self, handle: dict[str, Any]) -> Status:
        raise NotImplementedError

    def logs(self, handle: dict[str, Any], follow: bool, out: TextIO) -> None:
        raise NotImplementedError

    def cancel(self, handle: dict[str, Any]) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


def combine(states: list[str]) -> str:
    """One state for a multi-process run."""
    if not states:
        return UNKNOWN
    if CANCELLED in states:
        return CANCELLED
    if FAILED in states:
        return FAILED
    if PREEMPTED in states:
        return PREEMPTED
    if all(s == FINISHED for s in states):
        return FINISHED
    for state in (RUNNING, STARTING, PENDING):
        if state in states:
            return state
    return UNKNOWN
