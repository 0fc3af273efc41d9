"""Gradients of the tiny Mistral, Mixtral, Gemma 3 and DeepSeek-V3 under fsdp and tp vs one device.

``python -m tests.sharding.family_parity [FAMILY ...]`` (8 simulated CPU devices) prints one
JSON object per family and strategy: the relative differences (``parity.rel``) of the loss
and of every gradient from the one-device run of the same code, and the partition specs of
the parameters, so a test can check that the layout did split them.
"""

from __future__ import annotations

import json  # noqa: E402
import sys
from typing import Any  # noqa: E402

import jax  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from theseus.core.sharding.config import ShardingConfig  # noqa: E402
from theseus.core.sharding.placement import Layout  # noqa: E402
from theseus.core.train.state import TrainState  # noqa: E402
from theseus.core.train.step import cross_entropy  # noqa: E402

from tests.models.conftest import tiny  # noqa: E402
from tests.sharding import parity  # sets the simulated devices before JAX starts

FAMILIES = ["mistral", "mixtral", "gemma3", "deepseek_v3"]
STRATEGIES = {"fsdp": (1, 8, 1), "tp": (4, 1, 2)}  # (data, fsdp, tensor)


def gradients(family: str, layout: Layout, initial: Any = None) -> dict[str, Any]:
    """Loss and gradients (per token) of one batch, and the parameters' partition specs;
    ``initial``: the starting state as host arrays (``parity.placed``), else made here (its
    host copy is the result's ``initial``)."""
    model = tiny(family, vocab_size=parity.VOCAB)
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    objective = cross_entropy(graphdef, rest)

    def fresh() -> TrainState:
        _, params, _ = nnx.split(tiny(family, vocab_size=parity.VOCAB), nnx.Param, ...)
        return TrainState.fresh(params, optax.identity())

    state, _, grad_fn = parity.placed(layout, fresh, objective, initial)
    grads, (ce, count, _) = grad_fn(
        state.params, state.frozen, layout.place_batch(parity.batch_of(0))
    )
    return {
        "initial": jax.device_get(state) if initial is None else initial,
        "loss": float(parity.per_token(ce, count)),
        "grads": {k: parity.per_token(g, count) for k, g in parity.to_flat(grads).items()},
        "specs": parity.specs_of(state.params),
    }


def main(families: list[str]) -> None:
    for family in families:
        reference = gradients(family, Layout(ShardingConfig(), jax.devices()[:1]))
        for strategy, (data, fsdp, tensor) in STRATEGIES.items():
            config = ShardingConfig(strategy=strategy, data=data, fsdp=fsdp, tensor=tensor)
            # from the reference's starting state: only the layout differs
            got = gradients(family, Layout(config), reference["initial"])
            record = {
                "family": family,
                "strategy": strategy,
                "loss": abs(got["loss"] - reference["loss"]) / abs(reference["loss"]),
                "grads": parity.rel(got["grads"], reference["grads"]),
                "specs": got["specs"],
            }
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or FAMILIES)
