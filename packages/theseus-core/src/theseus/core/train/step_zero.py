"""Step 0 of a run made from weights rather than trained: what ``hf/import`` and
``lora/merge`` write, so that everything that takes a training run takes theirs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
from theseus.core.rundir import RunDir
from theseus.core.train.checkpoints import Checkpoints
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import Recipe
from theseus.core.train.setup import TrainSetup
from theseus.core.train.state import TrainState

if TYPE_CHECKING:
    from theseus.core.registry import Registries


def write_step_zero(
    config: TrainJobConfig,
    registries: Registries,
    run: RunDir,
    params_of: Callable[[Any], Any],
    meta: dict[str, Any],
    recipe: Recipe,
) -> int:
    """Checkpoint 0 of ``run``, a run of the job whose ``recipe`` is given (set up as that
    job sets up, e.g. DPO's preference pairs): the weights ``params_of(abstract params)``
    gives (placed as the config's mesh places them), a fresh optimizer state, ``meta`` in
    its record; the number of parameters. Written by core's ``Checkpoints``, so restores
    check its shapes and digests."""
    setup = TrainSetup.build(config, registries, config.model.vocab_size, recipe)
    params = params_of(setup.abstract_state.params)
    shardings = setup.state_shardings.saved()  # a checkpoint holds no frozen weights
    fresh = jax.jit(lambda p: TrainState.fresh(p, setup.optimizer).saved(), out_shardings=shardings)
    saved = fresh(params)
    checkpoints = Checkpoints.writer(run.checkpoint_dir, config.checkpoint, asynchronous=False)
    meta = {
        "step": 0,
        "run": run.name,
        "data_position": 0,
        "total_steps": setup.total_steps,
        **meta,
    }
    try:
        checkpoints.save(0, saved, setup.data_rng(), meta)
        checkpoints.wait()
    finally:
        checkpoints.close()
    return sum(int(leaf.size) for leaf in jax.tree.leaves(saved["params"]))
