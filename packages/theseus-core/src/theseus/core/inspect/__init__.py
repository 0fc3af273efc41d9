"""Look inside runs: time travel to any checkpoint, replay a step, capture activations.

from theseus.core.inspect import open_step
moment = open_step("runs", "my-run", step=200)
moment.replay()["loss"]            # equals the loss logged for step 200, bitwise on CPU
acts = moment.capture(["blocks.3.attn"])
moment.module("blocks.3.attn")(*acts["blocks.3.attn"].args)   # poke at it eagerly

``open_step`` and ``Moment`` load JAX, so they are imported on first use: the CLI's
``theseus runs`` and ``theseus plot`` live in this package and stay quick.
"""

from typing import Any

__all__ = ["Moment", "open_step"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from theseus.core.inspect import timetravel

        return getattr(timetravel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
