"""Tensor rules: which HF tensors fill which theseus parameters, by exact transforms only.

A rule pairs our parameter paths with HF tensor names and two functions (transpose,
reshape, split, stack: no arithmetic), so HF -> theseus -> HF is bit-exact. A family's
``hf.py`` builds its ``rules(config)`` from the constructors here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

ParamPath = tuple[str | int, ...]


def param_path(keys: Iterable[Hashable]) -> ParamPath:
    """A parameter's path in a flattened ``nnx`` state (attribute names and list indices)."""
    return tuple(key if isinstance(key, int) else str(key) for key in keys)


@dataclass(frozen=True)
class Rule:
    """Our parameters ``ours`` <-> HF tensors ``theirs``, by two exact functions."""

    ours: tuple[ParamPath, ...]
    theirs: tuple[str, ...]
    to_hf: Callable[..., list]  # our arrays -> HF arrays (traceable: run under eval_shape)
    to_ours: Callable[[list, list[tuple[int, ...]]], list]  # HF arrays, our shapes -> ours


def same(ours: ParamPath, theirs: str) -> Rule:
    """The same values in the same layout (reshaped to our shape on import)."""
    return Rule((ours,), (theirs,), lambda x: [x], lambda w, s: [w[0].reshape(s[0])])


def flat(ours: ParamPath, theirs: str) -> Rule:
    """A bias stored (heads, head_dim) here and flat in HF."""
    return Rule((ours,), (theirs,), lambda x: [x.reshape(-1)], lambda w, s: [w[0].reshape(s[0])])


def torch_linear(ours: ParamPath, theirs: str, n_in: int) -> Rule:
    """Our kernel (in..., out...) <-> torch ``Linear.weight`` (out, in)."""

    def to_hf(k):
        return [k.reshape(math.prod(k.shape[:n_in]), -1).T]

    return Rule((ours,), (theirs,), to_hf, lambda w, s: [w[0].T.reshape(s[0])])


def conv1d(ours: ParamPath, theirs: str, n_in: int) -> Rule:
    """Our kernel (in..., out...) <-> GPT-2 ``Conv1D.weight`` (in, out)."""

    def to_hf(k):
        return [k.reshape(math.prod(k.shape[:n_in]), -1)]

    return Rule((ours,), (theirs,), to_hf, lambda w, s: [w[0].reshape(s[0])])


def fused_qkv(ours: tuple[ParamPath, ParamPath, ParamPath], theirs: str, axis: int) -> Rule:
    """GPT-2's ``c_attn`` holds q, k and v side by side along its last axis."""

    def to_hf(q, k, v):
        lead = q.shape[:1] if axis else ()
        return [jnp.concatenate([x.reshape(*lead, -1) for x in (q, k, v)], axis=axis)]

    def to_ours(w, shapes):
        return [p.reshape(s) for p, s in zip(np.split(w[0], 3, axis=axis), shapes, strict=True)]

    return Rule(ours, (theirs,), to_hf, to_ours)


def experts(ours: ParamPath, theirs: list[str]) -> Rule:
    """Our stacked expert kernel (E, in, out) <-> E torch ``Linear.weight`` (out, in)."""
    return Rule(
        (ours,),
        tuple(theirs),
        lambda k: [k[e].T for e in range(len(theirs))],
        lambda w, s: [np.stack([x.T for x in w])],
    )


SWIGLU_NAMES = ("gate_proj", "up_proj", "down_proj")


def routed_experts(
    ours: ParamPath, moe: str, n_experts: int, names: tuple[str, str, str] = SWIGLU_NAMES
) -> list[Rule]:
    """An ``MoE`` layer's router (``<moe>.gate``) and its E experts' gate, up and down
    projections (``<moe>.experts.<e>.<name>``, ``names`` in that order), stacked here."""
    gate, up, down = names
    each = [f"{moe}.experts.{e}" for e in range(n_experts)]
    return [
        torch_linear((*ours, "router", "kernel"), f"{moe}.gate.weight", 1),
        experts((*ours, "w_gate"), [f"{n}.{gate}.weight" for n in each]),
        experts((*ours, "w_up"), [f"{n}.{up}.weight" for n in each]),
        experts((*ours, "w_down"), [f"{n}.{down}.weight" for n in each]),
    ]
