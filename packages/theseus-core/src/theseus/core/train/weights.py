"""Where a run's weights come from, decided once when its setup is built.

A run starts from a :class:`WeightSource`: the seeded initialisation, a Hugging Face folder
(``init.hf``) or another run's checkpoint (``init.checkpoint=RUN[@STEP]``). Its
:data:`FrozenRole` says what the state's frozen part holds:

* ``none``: nothing (every parameter trains);
* ``base``: a LoRA run's frozen base (only adapters train). Checkpoints hold the adapters
  alone; the base is read again from the source on every start and restore;
* ``reference``: a frozen copy of the initial weights beside a fully trained model (DPO's
  reference), read again from the source on restore.

Each source gives the same bits every time, so a restored run continues bit for bit. The
loading itself (which opens other runs) is in :mod:`theseus.core.train.opening`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import jax
from flax import nnx
from theseus.core.errors import ConfigError
from theseus.core.train.digest import path_name

FrozenRole = Literal["none", "base", "reference"]


def frozen_role(adapted: bool, keeps_reference: bool) -> FrozenRole:
    """``base`` for a LoRA run (its frozen weights are the base it adapts), ``reference``
    for a fully trained run that compares against its start (DPO), else ``none``."""
    if adapted:
        return "base"
    return "reference" if keeps_reference else "none"


@dataclass(frozen=True)
class WeightSource:
    """The initial weights of a run: ``seed``, ``hf`` (a folder) or ``checkpoint`` (a run)."""

    kind: Literal["seed", "hf", "checkpoint"]
    location: str = ""  # the folder of ``hf``, ``RUN[@STEP]`` of ``checkpoint``

    @classmethod
    def of(cls, init: Any) -> WeightSource:
        """The source an ``init`` config group names (``InitConfig``, which refuses both)."""
        if init.hf:
            return cls("hf", str(init.hf))
        if init.checkpoint:
            return cls("checkpoint", str(init.checkpoint))
        return cls("seed")

    def __str__(self) -> str:
        if self.kind == "seed":
            return "the seeded initialisation"
        return f"init.{self.kind}={self.location}"


def placed_like(weights: Any, like: nnx.State, source: str) -> nnx.State:
    """``weights`` (same paths and shapes as ``like``) in ``like``'s dtypes and shardings."""

    def flat(tree: Any) -> dict[str, Any]:
        return {path_name(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}

    theirs, ours = flat(weights), flat(like)
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected:
        raise ConfigError(
            f"{source}: its parameters do not fit this model (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}): check model.* against that run's config"
        )
    for key, leaf in ours.items():
        if tuple(theirs[key].shape) != tuple(leaf.shape):
            raise ConfigError(
                f"{source}: parameter {key} has shape {tuple(theirs[key].shape)} there but "
                f"{tuple(leaf.shape)} in this model config"
            )
    return jax.tree.map(
        lambda new, old: jax.device_put(new.astype(old.dtype), getattr(old, "sharding", None)),
        weights,
        like,
    )
