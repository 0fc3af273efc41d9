"""How one step's global batch is split: over processes, over the mesh's batch shards, and
into micro-steps; every rule checked once, where the run starts.

The loader reads each process's slice of it and the train step accumulates its micro-steps;
both take the same :class:`BatchPlan`, so neither derives the split again.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.data.errors import DataError
from theseus.core.errors import ConfigError


class BatchPlanError(ConfigError, DataError):
    """A global batch that does not split as the run needs (a config the user changes)."""


@dataclass(frozen=True)
class BatchPlan:
    """One step's batch in rows: ``global_rows`` = ``processes`` x ``process_rows`` =
    ``micro_steps`` x ``batch_shards`` x ``per_device``. With ``pairs`` (preference data:
    rows 2p and 2p + 1 are one pair) every process and every micro-step holds whole pairs."""

    global_rows: int
    per_device: int  # rows of one batch shard in one micro-step
    micro_steps: int
    batch_shards: int  # ways the mesh splits the batch (its data-parallel degree)
    processes: int
    pairs: bool = False

    @classmethod
    def of(
        cls,
        global_rows: int,
        *,
        per_device: int = 0,
        batch_shards: int = 1,
        processes: int = 1,
        pairs: bool = False,
    ) -> BatchPlan:
        """The plan, or a :class:`BatchPlanError` naming the option to change.
        ``per_device`` 0: the whole batch in one micro-step."""
        _check_processes(global_rows, processes, pairs)
        per_device = per_device or global_rows // max(batch_shards, 1)
        per_step = per_device * batch_shards
        if per_device <= 0 or global_rows % per_step:
            raise BatchPlanError(
                f"training.global_batch_size={global_rows} is not a multiple of "
                f"training.per_device_batch_size={per_device} x {batch_shards} devices = "
                f"{per_step}"
            )
        micro_steps = global_rows // per_step
        if pairs and per_step % 2:
            raise BatchPlanError(
                f"training.global_batch_size={global_rows} in {micro_steps} micro-steps gives "
                f"{per_step} rows each, which splits a pair; choose "
                "training.per_device_batch_size so each micro-batch is even"
            )
        return cls(global_rows, per_device, micro_steps, batch_shards, processes, pairs)

    @property
    def process_rows(self) -> int:
        """Rows each process reads per step (its contiguous slice of the global batch)."""
        return self.global_rows // self.processes

    @property
    def micro_rows(self) -> int:
        """Rows of one micro-step, over all devices."""
        return self.per_device * self.batch_shards

    @property
    def items(self) -> int:
        """What one step samples: documents or rows, or pairs under ``pairs``."""
        return self.global_rows // (2 if self.pairs else 1)


def _check_processes(global_rows: int, processes: int, pairs: bool) -> None:
    if global_rows < 1:
        raise BatchPlanError(f"training.global_batch_size={global_rows}: must be at least 1")
    if pairs and global_rows % 2:
        raise BatchPlanError(
            f"global batch size {global_rows} is odd: the pairs layout needs two rows per "
            "preference pair (chosen, rejected)"
        )
    if global_rows % processes:
        raise BatchPlanError(
            f"global batch size {global_rows} is not divisible by the {processes} processes"
        )
    if pairs and (global_rows // processes) % 2:
        raise BatchPlanError(
            f"global batch size {global_rows} gives each of the {processes} processes "
            f"{global_rows // processes} rows: the pairs layout needs an even number (whole "
            "pairs) per process"
        )
