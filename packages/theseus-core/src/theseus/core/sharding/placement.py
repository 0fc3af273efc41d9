"""Shardings of the train state and the batch, from a strategy's rules and a mesh.

Steps are traced under the mesh (``jax.sharding.use_abstract_mesh`` inside the jitted
function: ``jax.set_mesh`` cannot be entered during a trace), so layers that need collectives
(ring attention over ``context``, the experts' all-to-all over ``expert``) read the axis names
and sizes with ``jax.sharding.get_abstract_mesh()``. With ``sharding.context`` > 1 the batch's
sequence dimension is split over ``context`` and every row is put into the sequence layout
(``theseus.core.sharding.sequence``) on the host, as it becomes a global array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from theseus.core.sharding.config import ShardingConfig, ShardingError
from theseus.core.sharding.mesh import make_mesh
from theseus.core.sharding.rules import CONTEXT_AXIS, Rules, rules_for
from theseus.core.sharding.sequence import layout_order
from theseus.core.sharding.traced_rules import tracing_with


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def path_name(path: Sequence[Any], keep_value: bool = False) -> str:
    """A pytree path as dotted text (``params.blocks.mlp.kernel``); nnx's ``value`` level is
    dropped unless ``keep_value`` (checkpoint records keep it)."""
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(p for p in parts if keep_value or p != "value")


def logical_axes(variable: Any) -> tuple[str | None, ...] | None:
    """The logical axis names a model gave a parameter (``out_sharding`` / ``sharding``)."""
    if not _is_variable(variable):
        return None
    meta = variable.get_metadata()
    for key in ("out_sharding", "sharding_names", "sharding"):
        if meta.get(key) is not None:
            return tuple(meta[key])
    return None


def spec_for(
    name: str,
    shape: tuple[int, ...],
    logical: Sequence[str | None] | None,
    rules: Rules,
    sizes: dict[str, int],
) -> PartitionSpec:
    """The PartitionSpec of one array; a dimension its mesh axes do not divide is an error."""
    if not logical:
        return PartitionSpec()
    if len(logical) != len(shape):
        raise ShardingError(
            f"parameter {name} of shape {shape} names {len(logical)} axes {logical}"
        )
    parts: list[Any] = []
    used: set[str] = set()
    for dim, axis_name in zip(shape, logical, strict=True):
        axes = tuple(a for a in rules.get(axis_name or "", ()) if sizes[a] > 1 and a not in used)
        if not axes:
            parts.append(None)
            continue
        ways = math.prod(sizes[a] for a in axes)
        if dim % ways:
            mesh_axes = " x ".join(f"{a}={sizes[a]}" for a in axes)
            raise ShardingError(
                f"parameter {name} of shape {shape}: its {axis_name!r} dimension ({dim}) does "
                f"not divide the mesh axis {mesh_axes}; choose another sharding.strategy or mesh"
            )
        used.update(axes)
        parts.append(axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*parts)


class Layout:
    """A mesh and the shardings of everything the train step touches."""

    def __init__(
        self, config: ShardingConfig, devices: Sequence[Any] | None = None, experts: int = 0
    ) -> None:
        """The mesh of ``config`` over ``devices`` (all by default) for a model of ``experts``
        routed experts (0: a dense model): ``sharding.expert=0`` splits a mixture's experts
        over the ``expert`` axis (``config.auto_experts``). A training job's layout comes from
        its whole config: ``theseus.core.train.setup.job_layout``."""
        self.config = config
        self.experts = experts
        self.rules = rules_for(config.strategy)
        self.mesh: Mesh = make_mesh(config, devices, experts)
        self.sizes: dict[str, int] = dict(self.mesh.shape)
        self.batch_axes = tuple(a for a in self.rules.batch if self.sizes[a] > 1)
        self.context = self.sizes[CONTEXT_AXIS]  # devices each sequence is split over
        self._orders: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ specs
    @property
    def batch_shards(self) -> int:
        """Ways the batch is split (the data-parallel degree)."""
        return math.prod(self.sizes[a] for a in self.rules.batch)

    @property
    def batch_spec(self) -> PartitionSpec:
        """Rows over the batch axes; with ``context`` > 1, positions over ``context``."""
        rows = None
        if self.batch_axes:
            rows = self.batch_axes if len(self.batch_axes) > 1 else self.batch_axes[0]
        if self.context > 1:
            return PartitionSpec(rows, CONTEXT_AXIS)
        return PartitionSpec(rows) if rows else PartitionSpec()

    def sharding(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    @property
    def replicated(self) -> NamedSharding:
        return self.sharding(PartitionSpec())

    @property
    def batch_sharding(self) -> NamedSharding:
        return self.sharding(self.batch_spec)

    def specs(self, tree: Any, rules: Rules) -> Any:
        """PartitionSpecs for a tree of (abstract) arrays, from the logical axes it carries."""

        def one(path: Any, leaf: Any) -> Any:
            logical = logical_axes(leaf)
            value = leaf.get_value() if _is_variable(leaf) else leaf
            spec = spec_for(path_name(path), tuple(np.shape(value)), logical, rules, self.sizes)
            return jax.tree.map(lambda _: spec, leaf) if _is_variable(leaf) else spec

        return jax.tree.map_with_path(one, tree, is_leaf=_is_variable)

    def param_specs(self, params: Any) -> Any:
        return self.specs(params, self.rules.params)

    def shardings(self, specs: Any) -> Any:
        return jax.tree.map(self.sharding, specs, is_leaf=lambda x: isinstance(x, PartitionSpec))

    def param_shardings(self, params: Any) -> Any:
        return self.shardings(self.param_specs(params))

    def optimizer_shardings(self, tree: Any) -> Any:
        """Shardings of optimizer-state-like trees (the optimizer's own rules)."""
        return self.shardings(self.specs(tree, self.rules.optimizer))

    def grad_shardings(self, params: Any) -> Any:
        """Gradients laid out like the optimizer state (ZeRO-1: a reduce-scatter, not an
        all-reduce; FSDP and TP: like the parameters)."""
        return self.optimizer_shardings(params)

    # ------------------------------------------------------------------ placement
    def place(self, tree: Any, shardings: Any) -> Any:
        return jax.device_put(tree, shardings)

    def replicate(self, value: Any) -> jax.Array:
        """A host value (the same on every process) as an array replicated on the mesh."""
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, self.replicated, lambda index: host[index])

    def on_mesh(self, fn: Any) -> Any:
        """``fn`` traced under this mesh and these parameter rules: layers read them with
        ``get_abstract_mesh()`` and ``traced_rules.param_rules()``."""
        abstract = self.mesh.abstract_mesh

        def traced(*args: Any) -> Any:
            with jax.sharding.use_abstract_mesh(abstract), tracing_with(self.rules.params):
                return fn(*args)

        return traced

    def jit(self, fn: Any, **jit_options: Any) -> MeshJit:
        """``jax.jit(fn, **jit_options)``, traced, lowered and run under this mesh."""
        return MeshJit(jax.jit(self.on_mesh(fn), **jit_options), self.mesh)

    def jit_step(self, step: Any, state_shardings: Any) -> MeshJit:
        """``step(state, batch) -> (state, metrics)`` jitted with these shardings, the state
        donated, metrics replicated; traced under this mesh."""
        return self.jit(
            step,
            in_shardings=(state_shardings, self.batch_sharding),
            out_shardings=(state_shardings, self.replicated),
            donate_argnums=0,
        )

    def sequence_order(self, seq_len: int) -> np.ndarray | None:
        """The permutation that puts a row into the context layout (None: no context split)."""
        if self.context == 1:
            return None
        if seq_len not in self._orders:
            self._orders[seq_len] = layout_order(seq_len, self.context, self.config.context_order)
        return self._orders[seq_len]

    @property
    def platform(self) -> str:
        """The devices' platform (``cpu``, ``gpu``, ``tpu``): compile-only TPU devices say
        ``tpu`` on any machine, whatever ``jax.default_backend()`` is."""
        return self.mesh.devices.flat[0].platform

    @property
    def device_kind(self) -> str:
        return self.mesh.devices.flat[0].device_kind

    def place_batch(self, local_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """Global batch arrays from this process's contiguous slice of the global batch, each
        row in the context layout when the sequence is split (a host-side permutation of the
        loader's rows: positions, segment ids, targets and loss masks move with their tokens,
        so the summed loss is unchanged; readers outside the step keep the loader's order)."""
        sharding = self.batch_sharding
        placed = {}
        for key, value in local_batch.items():
            value = np.asarray(value)
            order = self.sequence_order(value.shape[1]) if value.ndim == 2 else None
            if order is None:
                placed[key] = jax.make_array_from_process_local_data(sharding, value)
                continue
            global_shape = (value.shape[0] * jax.process_count(), value.shape[1])
            slab = self._process_columns(value[:, order], global_shape)
            placed[key] = jax.make_array_from_process_local_data(sharding, slab, global_shape)
        return placed

    def _process_columns(self, value: np.ndarray, global_shape: tuple[int, ...]) -> np.ndarray:
        """The columns this process's devices hold (all of them unless ``context`` spans
        processes, when each process passes its own slice of every row)."""
        indices = self.batch_sharding.addressable_devices_indices_map(global_shape).values()
        spans = [index[1].indices(global_shape[1])[:2] for index in indices if index is not None]
        start, stop = min(a for a, _ in spans), max(b for _, b in spans)
        return value[:, start:stop]

    def micro_sharding(self) -> NamedSharding:
        """Micro-batches stacked on a leading axis: that axis replicated, rows split."""
        return self.sharding(PartitionSpec(None, *self.batch_spec))


class MeshJit:
    """A jitted function that is traced, lowered and called under ``jax.set_mesh(mesh)``.

    Kernels that must run per shard (splash in ``shard_map``) read the mesh at trace time
    from ``jax.sharding.get_abstract_mesh()``; every other attribute is the jitted
    function's.
    """

    def __init__(self, jitted: Any, mesh: Mesh) -> None:
        self.jitted = jitted
        self.mesh = mesh

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.jitted(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.jitted.lower(*args, **kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        with jax.set_mesh(self.mesh):
            return self.jitted.trace(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)


def per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded (abstract) arrays: the largest shard."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        sharding = getattr(leaf, "sharding", None)
        shape = sharding.shard_shape(leaf.shape) if sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total
