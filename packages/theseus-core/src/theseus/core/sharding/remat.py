"""Activation checkpointing: what each transformer block keeps for its backward pass.

A block's layers tag what they compute with ``jax.ad_checkpoint.checkpoint_name``, and each
``sharding.remat`` level is a policy over those tags (and over matmuls in general, for layers
that tag nothing). From the most kept (fastest, most memory) to the least:

* ``none``: every matmul output and the attention kernel's output; only elementwise work
  (norms, activations, rotary embeddings) is recomputed, fused into the backward.
* ``block``: the matmul outputs without batch dimensions (projections, not attention scores)
  and the attention kernel's output.
* ``mlp``: the tagged values except the MLP's hidden projections (``mlp_hidden``, the
  widest activations of a block), recomputed from the block's saved input to the MLP.
* ``attention``: each block's input and the attention kernel's output: every matmul is
  recomputed, the attention kernel's forward is not (what long sequences want, where the
  kernel is most of the step).
* ``full``: only each block's input; everything inside is recomputed.
* ``auto`` (the default): the first of ``none``, ``mlp``, ``attention``, ``full`` whose
  activations fit the chip beside the training state (``train/remat_choice.py``), decided
  once when the setup is built.

The attention kernels' residuals (their output and log-sum-exp) are tagged ``attention``: a
kept kernel output means the backward pass runs only the kernel's backward, never its forward
again. The level is part of the model's execution plan (``theseus.core.execution``): a
model runs each block through :func:`checkpointed` (a stack of layers under a scan too, once
per layer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx
from theseus.core.sharding.config import ShardingError

# What the layers tag (``checkpoint_name``); the policies below select by these names.
QKV = "qkv"  # the query, key and value projections
ATTENTION = "attention"  # the attention kernel's output (and its log-sum-exp residual)
ATTENTION_OUT = "attention_out"  # the attention's output projection
MLP_HIDDEN = "mlp_hidden"  # the MLP's up (and gate) projections: its widest activations
MLP_OUT = "mlp_out"  # the MLP's (or expert layer's) output

LEVELS = ("none", "block", "mlp", "attention", "full")  # most kept first
AUTO_LEVELS = ("none", "mlp", "attention", "full")  # what ``auto`` tries, in order
CHOICES = ("auto", *LEVELS)

_cp = jax.checkpoint_policies


def _not_mlp_hidden(prim: Any, *args: Any, **params: Any) -> bool:
    """Every tagged value except the MLP's hidden projections (untagged matmuls, such as
    an expert layer's insides, are recomputed)."""
    if prim.name == "name":
        return params.get("name") != MLP_HIDDEN
    return False


def _per_head_mixing(prim: Any, *args: Any, **params: Any) -> bool:
    """A matmul of per-head vectors (a 4-d or higher input) with one small square matrix
    (at most 256 wide): a rotary embedding's half swap, done on the matrix unit. Redoing it
    inside the backward's fusion costs less than keeping its output."""
    if prim is not jax.lax.dot_general_p or len(args) < 2:
        return False
    lhs, rhs = (tuple(getattr(a, "shape", ())) for a in args[:2])
    return len(lhs) >= 4 and len(rhs) == 2 and rhs[0] == rhs[1] <= 256


def _keeping(matmuls: Callable[..., Any]) -> Callable[..., Any]:
    """``matmuls`` (a policy over matmul outputs) plus the attention kernel's tagged output,
    without per-head mixing matrices."""
    names = _cp.save_only_these_names(ATTENTION)

    def keep(prim: Any, *args: Any, **params: Any) -> bool:
        if _per_head_mixing(prim, *args, **params):
            return False
        return bool(matmuls(prim, *args, **params) or names(prim, *args, **params))

    return keep


POLICIES: dict[str, Callable[..., Any]] = {
    "none": _keeping(_cp.dots_saveable),
    "block": _keeping(_cp.dots_with_no_batch_dims_saveable),
    "mlp": _not_mlp_hidden,
    "attention": _cp.save_only_these_names(ATTENTION),
    "full": _cp.nothing_saveable,
}


def policy(level: str) -> Callable[..., Any]:
    """The ``jax.checkpoint`` policy of a remat level (not ``auto``: choose one first)."""
    if level not in POLICIES:
        raise ShardingError(f"sharding.remat={level!r} is not one of {', '.join(CHOICES)}")
    return POLICIES[level]


def checkpointed(
    function: Callable[..., Any], level: str, *, scanned: bool = False
) -> Callable[..., Any]:
    """``function`` (a block's forward, the block module its first argument) recomputed in
    the backward pass, keeping what ``level``'s policy saves. A model applies its execution
    plan's level to each block this way (``theseus.core.execution``), whether its blocks run
    in a Python loop or (``scanned``) as the body of a scan over stacked layers.

    In a loop, ``none`` has nothing to recompute: ``function`` is returned as it is. In a
    scan every level is a policy: left alone, a scan keeps every intermediate in an L-stacked
    buffer, where an unrolled program lets XLA fuse the cheap elementwise work into the
    backward instead; ``none``'s policy keeps the matmul outputs and the attention kernel's
    output and recomputes the rest (norms, activations), that program's trade, as fast and
    with less memory. The scan already keeps XLA from merging the recomputed forward with the
    forward pass, so remat's own barrier (``prevent_cse``) is left out there: without it the
    gradient's matmuls share the recompute's gathered kernels under fsdp (with the barrier,
    XLA:GPU gathered each attention kernel a third time per layer once the projections
    gather their own: ``layers/linear.py``)."""
    if scanned:
        return nnx.remat(function, policy=policy(level), prevent_cse=False)
    if level == "none":
        return function
    return nnx.remat(function, policy=policy(level))
