"""``sharding.remat=auto``: the level that keeps the most and still fits the chip.

Decided once, when the setup is built, from what the step would hold at each level (no
compile): the training state (parameters, optimizer state, gradients) plus what the backward
pass keeps, read off the abstract forward pass (``jax.vjp``'s residuals under the level's
policy, traced with ``jax.eval_shape``; the parameters themselves are not counted twice),
plus a margin for the backward's working memory. The first of ``AUTO_LEVELS`` whose total
is at most ``FIT_FRACTION`` of the chip's memory wins; on a CPU (host memory, no chip to
fill) it is ``none``. A level named in the config is taken as it is.

The estimate is checked against the compiler's own memory analysis (tests/chips) and
against the chip (``bench/tpu_bench.py``); ``--dry-run`` prints the choice and its reason.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from theseus.core.chips.measured import section
from theseus.core.chips.specs import chip_of_device_kind
from theseus.core.execution import RematChoice
from theseus.core.sharding.placement import per_device_bytes
from theseus.core.sharding.remat import AUTO_LEVELS

_REMAT = section("remat")  # core/chips/measured.json: what each figure was measured on
FIT_FRACTION = float(_REMAT["fit_fraction"])  # of the chip's memory the level may fill
# One block's backward works on about this many times what a block keeps at level ``none``
# (its recomputed activations, their gradients, float32 rotary halves padded to full lanes):
# fitted to XLA:TPU's memory report of a step on a v5e.
WORKING = float(_REMAT["working"])
# Parameter-sized buffers a step in micro-steps holds beyond one in a single step: the
# scanned sum of the gradients and its next value (XLA:TPU's compile of Qwen3-0.6B's GRPO
# step, 8 micro-steps of 16 rows x 552 on a v5e: 4.1 GiB over the level's estimate on its
# 16 rows, 2.5x its float32 parameters)
ACCUMULATING = 2
ACCELERATORS = ("tpu", "gpu", "cuda", "rocm")
TPU_LANES = 128  # a TPU stores an array's minor axis padded to this many elements
GiB = 1024**3


def stored_bytes(shape: tuple[int, ...], dtype: Any, lanes: int = 0) -> int:
    """Bytes an array takes in memory; with ``lanes`` (a TPU's 128) its minor axis is
    stored padded to a multiple of it (a head_dim of 64 takes the room of 128)."""
    if lanes and shape:
        shape = (*shape[:-1], -(-shape[-1] // lanes) * lanes)
    return math.prod(shape) * np.dtype(dtype).itemsize


def residual_bytes(
    loss: Callable[[Any, Any], jax.Array], params: Any, batch: Any, lanes: int = 0
) -> int:
    """Bytes the backward pass of ``loss(params, batch)`` keeps, beyond the parameters
    (abstract: nothing is computed); ``lanes``: see ``stored_bytes``."""

    def residuals(p: Any, b: Any) -> Any:
        return jax.vjp(lambda q: loss(q, b), p)[1]

    kept = jax.tree.leaves(jax.eval_shape(residuals, params, batch))
    spare = collections.Counter(
        (tuple(p.shape), np.dtype(p.dtype)) for p in jax.tree.leaves(params)
    )
    total = 0
    for leaf in kept:
        key = (tuple(leaf.shape), np.dtype(leaf.dtype))
        if spare[key] > 0:  # a parameter itself, already held by the state
            spare[key] -= 1
            continue
        total += stored_bytes(tuple(leaf.shape), leaf.dtype, lanes)
    return total


def choose_remat(
    requested: str,
    platform: str,
    memory_bytes: int | None,
    fixed_bytes: int,
    kept_bytes: Callable[[str], int],
    layers: int = 1,
) -> RematChoice:
    """The level to run: ``requested`` unless it is ``auto``. ``fixed_bytes``: what one
    device holds whatever the level (the state, its gradients, compute-dtype copies of the
    weights); ``kept_bytes(level)``: what one device's backward pass keeps at ``level``;
    ``layers``: the blocks, for the working room of one block's backward (``WORKING``)."""
    if requested != "auto":
        return RematChoice(requested, "sharding.remat as configured")
    if platform not in ACCELERATORS or not memory_bytes:
        return RematChoice("none", "on the host's memory: nothing recomputed")
    budget = FIT_FRACTION * memory_bytes
    working = WORKING * kept_bytes(AUTO_LEVELS[0]) / max(layers, 1)
    tried = []
    for level in AUTO_LEVELS:
        need = fixed_bytes + working + kept_bytes(level)
        tried.append(f"{level} {need / GiB:.1f}")
        if need <= budget:
            return RematChoice(
                level,
                f"the most kept that fits: {', '.join(tried)} GiB of a {budget / GiB:.1f} GiB "
                f"budget ({FIT_FRACTION:.0%} of {memory_bytes / GiB:.2f})",
            )
    return RematChoice(
        AUTO_LEVELS[-1],
        f"nothing fits {budget / GiB:.1f} GiB ({', '.join(tried)} GiB); the least kept",
    )


def cast_copy_bytes(params: Any, params_bytes: int, compute_dtype: Any) -> int:
    """Bytes of the weights cast to the compute dtype, when they are held wider (float32
    weights, bfloat16 compute: half their bytes again)."""
    narrow = np.dtype(compute_dtype).itemsize
    widest = max((np.dtype(p.dtype).itemsize for p in jax.tree.leaves(params)), default=narrow)
    return params_bytes * narrow // widest if widest > narrow else 0


def device_memory_bytes(device: Any) -> int | None:
    """What one device can hold: a real device's own limit, else its chip's published (or
    measured usable) capacity; None for a device of no known chip (the host's CPU)."""
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit")
    except Exception:  # compile-only devices, and backends without memory statistics
        limit = None
    if limit:
        return int(limit)
    chip = chip_of_device_kind(device.device_kind)
    return chip.hbm_bytes if chip is not None else None


def decide_remat(
    requested: str,
    layout: Any,
    state: Any,
    batch: Any,
    loss_at: Callable[[str], Callable[..., Any]],
    compute_dtype: Any = "float32",
    layers: int = 1,
    micro_steps: int = 1,
) -> RematChoice:
    """``choose_remat`` for a setup: ``state`` and ``batch`` abstract (with their shardings:
    one micro-step's rows, what a backward pass holds at once), ``loss_at(level)`` the
    step's objective at that level (``objective(params, frozen, batch, key) -> (total,
    aux)``); weights held in a wider dtype than ``compute_dtype`` are also held cast to it
    (XLA casts a scanned stack once, outside the loop); ``layers``: the model's blocks.
    With ``micro_steps`` > 1 the step also holds the gradients' running sum beside each
    micro-step's own (``ACCUMULATING`` parameter copies)."""
    if requested != "auto":
        return RematChoice(requested, "sharding.remat as configured")
    device = layout.mesh.devices.flat[0]
    memory = device_memory_bytes(device)
    params = per_device_bytes(state.params)
    held = per_device_bytes((state.params, state.opt_state, state.frozen)) + params  # + grads
    held += cast_copy_bytes(state.params, params, compute_dtype)
    if micro_steps > 1:
        held += ACCUMULATING * params
    ways = max(1, layout.batch_shards * layout.context)
    lanes = TPU_LANES if layout.platform == "tpu" else 0
    cache: dict[str, int] = {}

    def kept(level: str) -> int:
        if level not in cache:
            loss = loss_at(level)
            with jax.set_mesh(layout.mesh):  # kernels read the mesh when traced
                total = residual_bytes(
                    lambda p, rest: loss(p, *rest, None)[0],
                    state.params,
                    (state.frozen, batch),
                    lanes,
                )
            cache[level] = total // ways
        return cache[level]

    return choose_remat(requested, layout.platform, memory, held, kept, layers)
