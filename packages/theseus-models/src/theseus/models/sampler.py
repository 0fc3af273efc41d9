"""Rollouts of a training setup's model: the compiled decoding loop over the setup's mesh.

:class:`RolloutSampler` is what ``theseus_sampler`` answers for a model with a KV cache.
It compiles :func:`theseus.models.decoding.decode_loop` once for the run's batch shape (its
rows, the prompt width of its task, its new tokens) under the setup's mesh: the parameters
are read where the trainer keeps them (split over ``fsdp`` and ``tensor`` as the step
splits them, gathered layer by layer as the forward pass gathers them), the rows are split
over the mesh's batch axes, and the KV cache with them (its kv heads over ``tensor``). Each
process passes the prompts and seeds of its own rows (a contiguous slice of the batch, as
the trainer's batches are laid out) and gets the same rows back; every row draws from keys
of its own seed, so what a row samples does not depend on how rows are split.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from theseus.core.sampler import RolloutPlan, SamplerRequest
from theseus.models.decoding import Decoded, DecodePlan, decode_loop
from theseus.models.generate import cache_reader, left_pad, trimmed
from theseus.models.sampling import Sampling


class RolloutSampler:
    """A setup's model decoding batches of ``request.rows`` prompts (see the module)."""

    def __init__(self, setup: Any, request: SamplerRequest) -> None:
        self.layout, self.graphdef, self.rest = setup.layout, setup.graphdef, setup.rest
        self.request = request
        reader = cache_reader(self.layout.platform)
        self.plan_ = DecodePlan(
            max_new_tokens=request.max_new_tokens,
            sampling=Sampling(request.temperature, request.top_k, request.top_p),
            stops=tuple(sorted(set(request.stop_tokens))),
            pad_id=request.pad_id,
            cache_slots=request.prompt_width + request.max_new_tokens,
            reader=reader,
            per_row_keys=True,
        )
        mesh = self.layout.mesh
        self.row_axes = row_axes(self.layout.batch_axes, dict(mesh.shape), request.rows)
        self.rows = NamedSharding(mesh, PartitionSpec(self.row_axes or None))
        self.abstract = setup.full_params(setup.abstract_state)
        self.jitted = self.layout.jit(
            partial(self.run, self.graphdef, self.plan_),
            out_shardings=Decoded(self.rows, self.rows, NamedSharding(mesh, PartitionSpec())),
        )

    @staticmethod
    def run(graphdef: Any, plan: DecodePlan, params: Any, rest: Any, *rows: jax.Array) -> Any:
        tokens, positions, segments, seeds = rows
        keys = jax.vmap(jax.random.key)(seeds)
        return decode_loop(graphdef, plan, (params, rest), tokens, positions, segments, keys)

    # ------------------------------------------------------------------ sampling
    def __call__(
        self, params: Any, prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        request = self.request
        local = request.rows // jax.process_count()
        if len(prompts) != local or len(seeds) != local:
            raise ValueError(
                f"{len(prompts)} prompts and {len(seeds)} seeds for this process's {local} rows"
            )
        if max(len(p) for p in prompts) > request.prompt_width:
            raise ValueError(f"a prompt is longer than the sampler's {request.prompt_width}")
        tokens, segments, positions = left_pad(prompts, request.pad_id, request.prompt_width)
        host = (tokens, positions, segments, np.asarray(seeds, np.uint32))
        placed = [jax.make_array_from_process_local_data(self.rows, a) for a in host]
        out_tokens, out_logps, _ = self.jitted(params, self.rest, *placed)
        return trimmed(local_rows(out_tokens), local_rows(out_logps), self.plan_.stops)

    def lower(self, params: Any) -> Any:
        rows, width = self.request.rows, self.request.prompt_width
        ints = jax.ShapeDtypeStruct((rows, width), jnp.int32, sharding=self.rows)
        seeds = jax.ShapeDtypeStruct((rows,), jnp.uint32, sharding=self.rows)
        return self.jitted.lower(params, self.rest, ints, ints, ints, seeds)

    # ------------------------------------------------------------------ what it holds
    def plan(self) -> RolloutPlan:
        """Per device: the KV cache of its rows and kv heads, the weights one turn reads in
        their compute dtype (all of them: split ones are gathered a layer at a time) and
        the bytes a turn reads on average over a full-length rollout (the weights, and the
        cache written so far)."""
        request, plan = self.request, self.plan_
        model = nnx.merge(self.graphdef, self.abstract, self.rest)
        cache = jax.eval_shape(
            lambda: model.init_cache(request.rows, plan.cache_slots, plan.reader)
        )
        sizes = self.layout.sizes
        row_ways = math.prod(sizes[a] for a in self.row_axes)
        G = cache.k.shape[2]
        head_ways = sizes.get("tensor", 1) if G % sizes.get("tensor", 1) == 0 else 1
        whole = sum(math.prod(x.shape) * x.dtype.itemsize for x in (cache.k, cache.v))
        per_device = whole / (row_ways * head_ways)
        slots = cache.k.shape[3]
        weights = compute_weight_bytes(model) / head_ways
        average_fill = request.prompt_width + request.max_new_tokens / 2
        read = weights + per_device * average_fill / slots
        return RolloutPlan(int(per_device), int(weights), float(read), plan.reader, slots)


def row_axes(batch_axes: tuple[str, ...], sizes: dict[str, int], rows: int) -> tuple[str, ...]:
    """The mesh's batch axes that split ``rows`` evenly, in order."""
    chosen: list[str] = []
    for axis in batch_axes:
        if rows % (math.prod(sizes[a] for a in chosen) * sizes[axis]) == 0:
            chosen.append(axis)
    return tuple(chosen)


def local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of a row-split global array, in order (each once, however many
    of its devices hold them)."""
    pieces: dict[int, np.ndarray] = {}
    for shard in array.addressable_shards:
        start = shard.index[0].start or 0
        pieces.setdefault(start, np.asarray(shard.data))
    return np.concatenate([pieces[start] for start in sorted(pieces)])


def compute_weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters as a decoding loop reads them (matrices in their
    layer's compute dtype, ``layers/compute_weights.py``)."""
    from theseus.models.layers.compute_weights import CAST_WHERE_USED

    total = 0
    for _, module in nnx.iter_graph(model):
        if not isinstance(module, nnx.Module):
            continue
        for value in vars(module).values():
            if not isinstance(value, nnx.Param):
                continue
            array = value[...]
            dtype = array.dtype
            if isinstance(module, CAST_WHERE_USED) and array.ndim >= 2:
                dtype = jnp.dtype(module.dtype)
            total += math.prod(array.shape) * jnp.dtype(dtype).itemsize
    return total
