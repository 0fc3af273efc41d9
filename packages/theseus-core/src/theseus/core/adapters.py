"""Adapters: small trained parameters beside a frozen model (LoRA and the like).

A run with ``lora.rank > 0`` asks the installed plugins for an adapted model class
(``theseus_adapt_model``). Its adapter weights are :class:`Adapter` variables; the trainer
differentiates and optimizes those alone, keeps every other parameter frozen (optionally in
``lora.base_dtype``), and checkpoints only the adapters: the frozen base is read again from
where it came from (``init.hf``, ``init.checkpoint``, or the seeded initialisation).

Dropout inside adapters draws from a key the train step sets for the duration of the forward
pass (:func:`dropout_key`); outside a train step (evaluation, generation) there is none, and
adapters run without dropout.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax
from flax import nnx


class Adapter(nnx.Param):
    """A parameter that is trained while the rest of the model stays frozen."""


class LayerIndex(nnx.Variable):
    """The index of the layer a module sits in (stacked over ``layers`` like parameters), so
    that per-layer randomness differs between layers of a scanned stack."""


_DROPOUT_KEY: contextvars.ContextVar[jax.Array | None] = contextvars.ContextVar(
    "theseus_dropout_key", default=None
)


@contextmanager
def dropout_key(key: jax.Array | None) -> Iterator[None]:
    """Make ``key`` the dropout key of the forward passes traced inside this block."""
    token = _DROPOUT_KEY.set(key)
    try:
        yield
    finally:
        _DROPOUT_KEY.reset(token)


def current_dropout_key() -> jax.Array | None:
    """The key set by :func:`dropout_key`, or None (no dropout)."""
    return _DROPOUT_KEY.get()


def split_trainable(params: nnx.State, adapted: bool) -> tuple[nnx.State, nnx.State]:
    """``(trainable, frozen)``: the adapters and everything else when ``adapted``, else every
    parameter and an empty state."""
    if not adapted:
        return params, nnx.State({})
    trainable, frozen = params.split(Adapter, ...)
    return trainable, frozen


def cast_frozen(frozen: nnx.State, dtype: str) -> nnx.State:
    """The frozen parameters stored in ``dtype`` ('' keeps them as they are)."""
    if not dtype:
        return frozen
    return jax.tree.map(lambda x: x.astype(dtype), frozen)


def count(tree: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(tree))
