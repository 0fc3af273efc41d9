"""Orbax checkpoints: asynchronous saves, keep-last-K plus every M-th, torn-save fallback.

A checkpoint holds the train state (parameters, optimizer state, step, skipped-step count),
the RNG key data and a JSON record (the step is also the data position, since the batch at
step s is a pure function of the seed and s).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from theseus.core.errors import TheseusError

log = logging.getLogger(__name__)
for _noisy in ("absl", "orbax"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


class CheckpointError(TheseusError):
    """Checkpoints exist but none can be restored."""


class Checkpoints:
    def __init__(
        self, directory: Path, keep_last: int, keep_every: int, asynchronous: bool
    ) -> None:
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max(1, keep_last),
            keep_period=keep_every or None,
            enable_async_checkpointing=asynchronous,
            create=True,
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, state: Any, rng_data: Any, meta: dict) -> None:
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            rng=ocp.args.StandardSave({"key_data": rng_data}),
            meta=ocp.args.JsonSave(meta),
        )
        self.manager.save(step, args=args, force=True)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def restore(self, step: int, abstract_state: Any, abstract_rng: Any) -> tuple[Any, Any, dict]:
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            rng=ocp.args.StandardRestore({"key_data": abstract_rng}),
            meta=ocp.args.JsonRestore(),
        )
        restored = self.manager.restore(step, args=args)
        return restored["state"], restored["rng"]["key_data"], dict(restored["meta"])

    def restore_latest(
        self, abstract_state: Any, abstract_rng: Any, at_most: int | None = None
    ) -> tuple[int, Any, Any, dict] | None:
        """Newest readable checkpoint (at or below ``at_most``); older ones on failure."""
        steps = [s for s in self.steps() if at_most is None or s <= at_most]
        if not steps:
            return None
        failures = []
        for step in reversed(steps):
            try:
                state, rng, meta = self.restore(step, abstract_state, abstract_rng)
            except Exception as error:  # torn or unreadable: try the previous one
                reason = (
                    f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                )
                log.warning(
                    "checkpoint %d in %s is unreadable (%s); trying the previous one",
                    step,
                    self.directory,
                    reason,
                )
                failures.append(f"{step} ({reason})")
                continue
            self._set_aside([int(f.split()[0]) for f in failures])
            return step, state, rng, meta
        raise CheckpointError(
            f"no checkpoint in {self.directory} can be restored: " + "; ".join(failures)
        )

    def _set_aside(self, steps: list[int]) -> None:
        """Move unreadable checkpoints to ``checkpoints.torn/`` so their steps can be redone."""
        if not steps:
            return
        aside = self.directory.parent / f"{self.directory.name}.torn"
        aside.mkdir(exist_ok=True)
        for step in steps:
            target = aside / str(step)
            suffix = 0
            while target.exists():
                suffix += 1
                target = aside / f"{step}.{suffix}"
            (self.directory / str(step)).rename(target)
            log.warning("moved unreadable checkpoint %d to %s", step, target)
        self.manager.reload()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def abstract_of(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )
