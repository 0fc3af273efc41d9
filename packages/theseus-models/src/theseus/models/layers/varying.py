"""Gradients of hand-written backward passes typed as JAX types its own, inside a shard_map.

Under ``shard_map``'s varying-axes check an array carries the manual mesh axes it varies over.
Where an input that does not vary over an axis meets one that does, JAX broadcasts it
implicitly, and its own gradient sums over that axis. A ``custom_vjp``'s backward must do the
same: :func:`summed_like` sums a gradient over the axes it varies over and its primal does not,
and marks it varying over those its primal varies over and it does not (a value equal on every
device of such an axis: its own part of the sum there).
"""

from __future__ import annotations

import jax


def summed_like(gradient: jax.Array, primal: jax.Array) -> jax.Array:
    """``gradient`` typed as ``primal``: summed over the manual axes it varies over and
    ``primal`` does not, varying over those ``primal`` varies over and it does not."""
    has, wanted = jax.typeof(gradient).mat.varying, jax.typeof(primal).mat.varying
    if has - wanted:
        gradient = jax.lax.psum(gradient, tuple(sorted(has - wanted)))
    if wanted - has:
        gradient = jax.lax.pcast(gradient, tuple(sorted(wanted - has)), to="varying")
    return gradient


def varying_alike(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    """``arrays`` each marked varying over every manual axis any of them varies over (what a
    kernel that reads them all produces: its result's type is taken from one of them)."""
    union = frozenset().union(*(jax.typeof(a).mat.varying for a in arrays))
    return tuple(
        jax.lax.pcast(a, tuple(sorted(missing)), to="varying")
        if (missing := union - jax.typeof(a).mat.varying)
        else a
        for a in arrays
    )
