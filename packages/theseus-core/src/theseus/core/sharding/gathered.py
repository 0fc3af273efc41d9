"""A parameter gathered whole for its matmuls, its gradient left split as the parameter is.

Under fsdp a parameter is split over the batch axes; a layer that gathers it itself (the
attention projections, the output head) constrains the copy it multiplies with to the whole
layout. A plain sharding constraint's gradient is constrained the same way, whole: the
compiler sums the gradient with an all-reduce and slices it afterwards (Llama 3.1 8B on v5p-64:
the attention kernels' 3.5 GiB and the head's 1 GiB of all-reduce a step, each moving twice
its size over the links). :func:`gathered` constrains the gradient to the parameter's own
split layout instead, so the sum and the split are one reduce-scatter.
"""

from __future__ import annotations

import functools

import jax
from jax.sharding import PartitionSpec
from theseus.core.sharding.placement import spec_for
from theseus.core.sharding.traced_rules import param_rules


def traced_param_spec(
    shape: tuple[int, ...], logical: tuple[str | None, ...]
) -> PartitionSpec | None:
    """How the layout a step is traced under splits a parameter of this shape and these
    logical axes; None outside a traced step (no mesh or no rules in context)."""
    mesh, rules = jax.sharding.get_abstract_mesh(), param_rules()
    if mesh is None or mesh.empty or rules is None:
        return None
    return spec_for("a parameter", shape, logical, rules, dict(mesh.shape))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def gathered(value: jax.Array, whole: PartitionSpec, split: PartitionSpec | None) -> jax.Array:
    """``value`` laid out ``whole``; its gradient laid out ``split`` (None: left to the
    compiler)."""
    return jax.lax.with_sharding_constraint(value, whole)


def _forward(value, whole, split):
    return gathered(value, whole, split), None


def _backward(whole, split, _, gradient):
    return (gradient if split is None else jax.lax.with_sharding_constraint(gradient, split),)


gathered.defvjp(_forward, _backward)
