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

A batch whose KV cache does not fit beside the trainer's state is decoded in passes: each
pass takes the same number of each process's rows (``SamplerRequest.rows_per_pass``, or as
many as fit: :meth:`RolloutSampler.fitting_rows`), one compilation for all of them.
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
from theseus.core.errors import ConfigError
from theseus.core.sampler import RolloutPlan, SamplerRequest
from theseus.core.sharding.placement import per_device_bytes
from theseus.core.train.remat_choice import FIT_FRACTION, device_memory_bytes
from theseus.models.decoding import Decoded, DecodePlan, decode_loop, kv_heads
from theseus.models.generate import cache_reader, left_pad, trimmed
from theseus.models.sampling import Sampling

LOGIT_COPIES = 4  # float32 logits a turn holds per row (the logits, softmax, sampling)


class RolloutSampler:
    """A setup's model decoding batches of ``request.rows`` prompts (see the module)."""

    def __init__(self, setup: Any, request: SamplerRequest) -> None:
        self.layout, self.graphdef, self.rest = setup.layout, setup.graphdef, setup.rest
        self.request = request
        self.decode = DecodePlan(
            max_new_tokens=request.max_new_tokens,
            sampling=Sampling(request.temperature, request.top_k, request.top_p),
            stops=tuple(sorted(set(request.stop_tokens))),
            pad_id=request.pad_id,
            cache_slots=request.prompt_width + request.max_new_tokens,
            reader=cache_reader(self.layout.platform),
            per_row_keys=True,
        )
        self.processes = jax.process_count()
        self.abstract = setup.full_params(setup.abstract_state)
        self.model = nnx.merge(self.graphdef, self.abstract, self.rest)
        self.resident = per_device_bytes(
            (
                setup.abstract_state.params,
                setup.abstract_state.opt_state,
                setup.abstract_state.frozen,
            )
        )
        sizes = self.layout.sizes
        heads = kv_heads(self.model)
        tensor = sizes.get("tensor", 1)
        self.head_ways = tensor if heads % tensor == 0 else 1
        self.pass_rows = request.rows_per_pass or self.fitting_rows()
        self.check_pass_rows()
        mesh = self.layout.mesh
        self.row_axes = row_axes(self.layout.batch_axes, dict(mesh.shape), self.pass_rows)
        self.rows = NamedSharding(mesh, PartitionSpec(self.row_axes or None))
        self.jitted = self.layout.jit(
            partial(self.run, self.graphdef, self.decode),
            out_shardings=Decoded._make(
                (self.rows, self.rows, NamedSharding(mesh, PartitionSpec()))
            ),
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
        local = request.rows // self.processes
        if len(prompts) != local or len(seeds) != local:
            raise ValueError(
                f"{len(prompts)} prompts and {len(seeds)} seeds for this process's {local} rows"
            )
        if max(len(p) for p in prompts) > request.prompt_width:
            raise ValueError(f"a prompt is longer than the sampler's {request.prompt_width}")
        tokens, segments, positions = left_pad(prompts, request.pad_id, request.prompt_width)
        host = (tokens, positions, segments, np.asarray(seeds, np.uint32))
        step = self.pass_rows // self.processes
        out_tokens, out_logps = [], []
        for start in range(0, local, step):
            part = [
                jax.make_array_from_process_local_data(self.rows, a[start : start + step])
                for a in host
            ]
            decoded = self.jitted(params, self.rest, *part)
            out_tokens.append(local_rows(decoded.tokens))
            out_logps.append(local_rows(decoded.logps))
        stops = self.decode.stops
        return trimmed(np.concatenate(out_tokens), np.concatenate(out_logps), stops)

    def lower(self, params: Any) -> Any:
        rows, width = self.pass_rows, self.request.prompt_width
        ints = jax.ShapeDtypeStruct((rows, width), jnp.int32, sharding=self.rows)
        seeds = jax.ShapeDtypeStruct((rows,), jnp.uint32, sharding=self.rows)
        return self.jitted.lower(params, self.rest, ints, ints, ints, seeds)

    # ------------------------------------------------------------------ what it holds
    def position_bytes(self) -> int:
        """Bytes of one row's keys and values at one position, every layer, on one device."""
        cache = jax.eval_shape(
            lambda: self.model.init_cache(1, self.decode.cache_slots, self.decode.reader)
        )
        whole = sum(x.shape[0] * x.shape[3] * x.dtype.itemsize for x in (cache.k, cache.v))
        return whole // self.head_ways

    def slots(self) -> int:
        cache = jax.eval_shape(
            lambda: self.model.init_cache(1, self.decode.cache_slots, self.decode.reader)
        )
        return int(cache.k.shape[2])

    def weight_bytes(self) -> int:
        """The weights one turn reads on one device, in their compute dtype (split ones are
        gathered a layer at a time: all of them, but the heads ``tensor`` splits)."""
        return compute_weight_bytes(self.model) // self.head_ways

    def row_bytes(self) -> int:
        """What one more row of a pass holds on a device: its cache and its logits."""
        vocab = int(self.model.config.vocab_size)
        return self.slots() * self.position_bytes() + LOGIT_COPIES * vocab * 4

    def budget(self) -> float:
        """What one device may fill (``FIT_FRACTION`` of its memory; 0: no limit known)."""
        memory = device_memory_bytes(self.layout.mesh.devices.flat[0])
        return FIT_FRACTION * memory if memory else 0.0

    def fitting_rows(self) -> int:
        """The most rows per pass (a whole number of passes per process, the same for every
        process) whose cache fits beside the trainer's state on one device (one row of each
        process when none does: the plan then says it does not fit)."""
        local = self.request.rows // self.processes
        budget = self.budget()
        if not budget:  # a host CPU: no limit to plan against
            return self.request.rows
        free = budget - self.resident - self.weight_bytes()
        ways = math.prod(self.layout.sizes[a] for a in self.layout.batch_axes)
        for per_process in sorted((d for d in range(1, local + 1) if local % d == 0), reverse=True):
            rows = per_process * self.processes
            if rows % ways == 0 and rows // ways * self.row_bytes() <= free:
                return rows
        return self.processes * ways

    def check_pass_rows(self) -> None:
        rows, passes = self.request.rows, self.pass_rows
        ways = math.prod(self.layout.sizes[a] for a in self.layout.batch_axes)
        if passes <= 0 or rows % passes or passes % (self.processes * ways):
            raise ConfigError(
                f"grpo.sample_rows={passes}: expected a divisor of the {rows} rows of a batch "
                f"that splits evenly over the {ways}-way batch split of "
                f"{self.processes} process(es)"
            )

    def plan(self) -> RolloutPlan:
        """Per device: the KV cache of one pass's rows, the weights one turn reads and the
        bytes a turn reads on average over a full-length rollout (the weights, and the
        cache written so far)."""
        request = self.request
        ways = math.prod(self.layout.sizes[a] for a in self.row_axes)
        rows_here = self.pass_rows // max(ways, 1)
        per_position = self.position_bytes()
        cache = rows_here * self.slots() * per_position
        average_fill = request.prompt_width + request.max_new_tokens / 2
        read = self.weight_bytes() + rows_here * average_fill * per_position
        return RolloutPlan(
            kv_cache_bytes=int(cache),
            weight_bytes=self.weight_bytes(),
            bytes_per_turn=float(read),
            reader=self.decode.reader,
            cache_slots=self.slots(),
            rows_per_pass=self.pass_rows,
            passes=request.rows // self.pass_rows,
            resident_bytes=int(self.resident),
            peak_bytes=int(self.resident + self.weight_bytes() + rows_here * self.row_bytes()),
            budget_bytes=int(self.budget()),
        )


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
            array = value.get_value()  # an array, or its shape and dtype in a plan
            dtype = array.dtype
            if isinstance(module, CAST_WHERE_USED) and array.ndim >= 2:
                dtype = jnp.dtype(module.dtype)
            total += math.prod(array.shape) * jnp.dtype(dtype).itemsize
    return total
