"""The KV cache of generation: every layer's keys and values, written in place.

:class:`KVCache` holds all layers at once, each position's kv heads side by side
(``LxBxSx(G*K)``: lane-dense on a TPU whatever the head_dim), the key segment ids (``BxS``, 0
for padding) and the fill index (slots written, the same for every row: prompts are
left-padded to one width). Inside a compiled decoding loop it is part of the loop's state,
and each step writes one slot of it in place: a layer gets a :class:`LayerCache`, a view of
the whole cache at its own layer index, writes its new keys there and attends over its
layer's slots, so no layer's cache is ever sliced out and stacked again.

Two static fields travel with it (part of the pytree's structure, not arrays):

* ``reader``: how a decoding step reads its layer (``decode_attention.READERS``: the Pallas
  kernel over the written slots on a TPU, plain JAX elsewhere);
* ``fresh``: nothing is written yet, so the next call is a prefill, whose tokens attend
  among themselves through the layer's planned kernel (the one training runs: splash on a
  TPU) before their keys and values are stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import jax
import jax.numpy as jnp
from theseus.models.layers.decode_attention import READERS


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class KVCache:
    """Keys/values of every layer (LxBxSx(G*K)), key segment ids (BxS) and the fill index.

    A layer may cache something else of the same rank in the two slots (multi-head latent
    attention keeps its compressed latent and its shared rotary key): ``value_shape``.
    """

    k: jax.Array
    v: jax.Array
    segment_ids: jax.Array
    index: jax.Array
    reader: str = field(default="reference", metadata={"static": True})
    fresh: bool = field(default=True, metadata={"static": True})

    @classmethod
    def zeros(
        cls,
        n_layers: int,
        batch: int,
        length: int,
        n_kv_heads: int,
        head_dim: int,
        dtype=jnp.float32,
        value_shape: tuple[int, int] | None = None,
        reader: str = "reference",
    ) -> KVCache:
        """``value_shape``: (heads, head_dim) of the value slot when it differs from the keys'."""
        if reader not in READERS:
            raise ValueError(f"reader={reader!r}: expected one of {', '.join(READERS)}")
        v_heads, v_dim = value_shape or (n_kv_heads, head_dim)
        return cls(
            jnp.zeros((n_layers, batch, length, n_kv_heads * head_dim), dtype),
            jnp.zeros((n_layers, batch, length, v_heads * v_dim), dtype),
            jnp.zeros((batch, length), jnp.int32),
            jnp.zeros((), jnp.int32),
            reader=reader,
        )

    @property
    def length(self) -> int:
        return self.k.shape[2]

    def written(self, k: jax.Array, v: jax.Array, segment_ids: jax.Array, tokens: int) -> KVCache:
        """The cache after a call that wrote ``tokens`` slots (its layers' new ``k``/``v``)."""
        return replace(
            self, k=k, v=v, segment_ids=segment_ids, index=self.index + tokens, fresh=False
        )


@dataclass(frozen=True)
class LayerCache:
    """Layer ``layer``'s view of the whole cache: its new keys go to slot ``index`` of that
    layer (:meth:`write`), its keys so far are :meth:`layer_kv`."""

    k: jax.Array  # LxBxSx(G*K), every layer
    v: jax.Array
    index: jax.Array
    layer: jax.Array | int
    reader: str = "reference"
    fresh: bool = False

    def write(self, k_BxTxW: jax.Array, v_BxTxW: jax.Array) -> LayerCache:
        """This layer's new keys and values (each position's heads side by side) stored at
        the fill index, in place."""
        start = (self.layer, 0, self.index, 0)
        k = jax.lax.dynamic_update_slice(self.k, k_BxTxW[None].astype(self.k.dtype), start)
        v = jax.lax.dynamic_update_slice(self.v, v_BxTxW[None].astype(self.v.dtype), start)
        return replace(self, k=k, v=v)

    def layer_kv(self) -> tuple[jax.Array, jax.Array]:
        """This layer's keys and values, BxSx(G*K) (every slot: the mask says which count)."""
        take = lambda x: jax.lax.dynamic_index_in_dim(x, self.layer, keepdims=False)  # noqa: E731
        return take(self.k), take(self.v)
