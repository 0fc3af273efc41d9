"""The output head's tables gathered whole once per step, before the chunked loss's scan.

Under fsdp the head's (embed x vocab) table is split over the batch axes like any other
parameter. Left to the compiler inside ``chunked_loss``'s scan, each piece of the sequence
either gathers the table again or, worse, computes partial logits over its slice of ``embed``
and sums them over the devices (a reduce-scatter of rows x vocab per piece). Qwen3-30B-A3B on
v5p-64 (32 pieces of T=4096, vocab 151,936) moved 75 GiB of collective-permutes and 18.6 GiB
of all-gathers per chip per step that way. Gathered once here (a bf16 copy: the table's bytes
per pass), the pieces multiply locally, and the gradient is summed once, with an all-reduce
(constrained to the table's split instead, it is reduce-scattered piece by piece inside the
scan: ``core.sharding.gathered``). A step traced with its layout takes ``sharded_loss``'s way
instead, which sums that gradient in a ring of permutes; this one serves the others (a
recipe's log-probabilities, a step traced without its layout's rules).

The cast to the compute dtype is held on each device's shard (an optimization barrier).
Without it XLA:TPU may move the cast after the gather and gather float32, twice the bytes;
where it lowers the gather as an all-reduce of a zero-padded whole table (its all-gather
decomposer did so for every gather of Llama 3.1 70B's step on v5p-256 compiled without the
slice's wraparound links), that is a 3.9 GiB float32 buffer for 70B's head.

No strategy splits ``vocab`` over ``tensor``, so the whole table is the replicated layout.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec
from theseus.core.sharding.placement import logical_axes

VOCAB = "vocab"  # the logical axis of the head's (and the embedding's) vocabulary


def gather_head(model: Any) -> None:
    """Make every parameter of ``model`` with a ``vocab`` axis whole on each device, in the
    model's compute dtype (no-op outside a mesh of several devices). Call after the hidden
    states are computed: only the head then reads the gathered copies (an untied input
    embedding's copy goes unused and is dropped by the compiler)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or mesh.size == 1:
        return
    dtype = getattr(model, "dtype", None)
    for _, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Param) or VOCAB not in (logical_axes(node) or ()):
            continue
        value = node.get_value()
        if dtype is not None and jnp.issubdtype(value.dtype, jnp.floating):
            # the barrier keeps the cast on the local shard, before the gather
            value = jax.lax.optimization_barrier(value.astype(dtype))
        node.set_value(jax.lax.with_sharding_constraint(value, PartitionSpec()))
