"""Look inside runs: time travel to any checkpoint, replay a step, capture activations.

from theseus.core.inspect import open_step
moment = open_step("runs", "my-run", step=200)
moment.replay()["loss"]            # equals the loss logged for step 200, bitwise on CPU
acts = moment.capture(["blocks.3.attn"])
moment.module("blocks.3.attn")(*acts["blocks.3.attn"].args)   # poke at it eagerly
"""

from theseus.core.inspect.timetravel import Moment, open_step

__all__ = ["Moment", "open_step"]
