"""The non-finite policy: stop at a NaN/inf loss, or skip such steps up to a limit.

A step's loss (NaN when its gradients are not finite) is checked when its values are read.
Without ``training.skip_nonfinite`` the first non-finite loss stops the run with a message
that says which checkpoint to suspect when it comes right after a restore; with it, the
step skipped its update inside the jitted step and the run stops only once more than
``training.max_skipped_steps`` were skipped.
"""

from __future__ import annotations

import math
from pathlib import Path

from theseus.core.errors import TheseusError
from theseus.core.train.callbacks import Callback


class NonFiniteLossError(TheseusError):
    """The loss became NaN or infinite."""


class NonFinitePolicy(Callback):
    def __init__(
        self,
        run_name: str,
        *,
        skip: bool,
        max_skipped: int,
        restored_from: tuple[int, Path] | None,
    ) -> None:
        self.run_name = run_name
        self.skip = skip
        self.max_skipped = max_skipped
        self.restored_from = restored_from  # (step, folder) of the checkpoint resumed from

    def on_values(self, step: int, values: dict[str, float]) -> None:
        loss = values["loss"]
        if not math.isfinite(loss) and not self.skip:
            raise NonFiniteLossError(self.message(step, loss))
        if self.skip and values["skipped"] > self.max_skipped:
            raise NonFiniteLossError(
                f"run {self.run_name} skipped {int(values['skipped'])} steps with a non-finite "
                f"loss by step {step} (training.max_skipped_steps={self.max_skipped}): the data "
                "or the learning rate needs a look"
            )

    def message(self, step: int, loss: float) -> str:
        restored = self.restored_from
        if restored is not None and step == restored[0]:  # the first step after a restore
            return (
                f"loss is {loss} at step {step} of run {self.run_name}, the first step after "
                f"restoring checkpoint {restored[0]} ({restored[1]}): that checkpoint is "
                f"suspect; move it into {restored[1].parent}.torn/ and rerun to resume from "
                "the one before"
            )
        return (
            f"loss is {loss} at step {step} of run {self.run_name}; the checkpoints saved "
            "before it are kept (set training.skip_nonfinite=true to skip such steps)"
        )
