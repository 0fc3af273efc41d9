"""Digests of arrays, computed where the arrays live: a checkpoint's record of what it holds.

Each array's bits are read as unsigned 32-bit words w_i (narrower types widened, 64-bit
types split) and summed twice modulo 2**32: plainly, and weighted by the odd number 2i + 1
of each word's position. Any change to a single word changes both sums (an odd weight is
invertible modulo 2**32), a swap of two words changes the weighted one, and integer sums
are exact, so the digest does not depend on how the array is sharded or on the order of
the reduction. It is a check against corruption on disk, not a cryptographic hash.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from theseus.core.sharding.placement import path_name as placement_path_name


def _words(x: jax.Array) -> jax.Array:
    """The array's bits as uint32 words (one per element; two for 64-bit elements)."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    size = x.dtype.itemsize
    if size == 4:
        return lax.bitcast_convert_type(x, jnp.uint32)
    if size == 8:
        return lax.bitcast_convert_type(x, jnp.uint32)  # a trailing axis of 2
    unsigned = {1: jnp.uint8, 2: jnp.uint16}[size]
    return lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _position(shape: tuple[int, ...]) -> jax.Array:
    """Row-major position of each element modulo 2**32, built without reshaping."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
        stride *= shape[axis]
    return index


def _digest(x: jax.Array) -> jax.Array:
    words = _words(x)
    weights = _position(words.shape) * jnp.uint32(2) + jnp.uint32(1)
    return jnp.stack([jnp.sum(words, dtype=jnp.uint32), jnp.sum(words * weights, dtype=jnp.uint32)])


@jax.jit
def _digests(leaves: list[jax.Array]) -> list[jax.Array]:
    return [_digest(leaf) for leaf in leaves]


def path_name(path: tuple[Any, ...]) -> str:
    """A pytree path as dotted text (``params.blocks.mlp.kernel.value``, ``opt_state.1.0.mu``)."""
    return placement_path_name(path, keep_value=True)


def array_digests(tree: Any) -> dict[str, str]:
    """``{dotted path: 16 hex digits}`` for every array leaf of ``tree`` (one device sync)."""
    leaves = [
        (path_name(path), jnp.asarray(leaf))
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        if isinstance(leaf, (jax.Array, np.ndarray)) and leaf.size
    ]
    values = jax.device_get(_digests([leaf for _, leaf in leaves]))
    return {
        name: f"{int(v[0]):08x}{int(v[1]):08x}" for (name, _), v in zip(leaves, values, strict=True)
    }
