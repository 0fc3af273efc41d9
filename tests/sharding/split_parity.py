"""Context and expert parallelism against one device, in a process with 8 simulated devices.

``python -m tests.sharding.split_parity SCENARIO ...`` prints one JSON object per scenario:

* ``attn:METHOD:ORDER:data,fsdp,context`` -- ``context_attention`` (ring or all_gather) on
  sequences split over ``context`` against a masked softmax over the whole sequence, for two
  cases (packed documents + GQA; packed documents + sliding window + MQA): the largest error
  of the output and of dq, dk, dv, each divided by its tolerance (``ratio`` < 1 passes).
* ``mutant:KIND`` -- the ring at 4 devices with a deliberate mask error at the chunk
  boundaries (``boundary``: across chunks, queries one position off, so the last query of a
  chunk sees the first key of the next; ``order``: zigzag rows read as contiguous), to show
  that the tolerance catches one.
* ``moe:data,fsdp,expert,tensor[:OPTION]`` -- the MoE layer with its experts over ``expert``
  against the layer on one device: outputs, input and parameter gradients, router
  statistics; OPTIONs joined by ``+``: ``unbalanced`` (every token's first choice is one
  expert), ``ragged_dot``, ``capacity=F`` (compared with the one-device layer run on each
  device's tokens separately: the documented per-device capacity rule), ``ragged`` (the
  ragged dispatch, dropless) or ``ragged=F`` (receive room F x a device's assignments: the
  drop fraction beside the one its fill rule gives, counted here with loops).
* ``train:MODEL:data,fsdp,expert,context[:METHOD[:mutant]]`` -- ``STEPS`` SGD steps of a
  tiny model through ``TrainSetup`` (sequence layout, traced under the mesh) and the same run
  on one device: both loss curves, the parameter specs of the expert weights, and the
  collectives of the compiled evaluation step (``mutant``: with the boundary leak).
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from functools import cache, partial  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402
from theseus.core.sharding.config import MESH_AXES  # noqa: E402
from theseus.core.sharding.placement import Layout
from theseus.core.sharding.sequence import layout_order  # noqa: E402

EPS = float(np.finfo(np.float32).eps)
MARGIN = 2.0  # as tests/models/test_attention_impls.py: the bound is MARGIN eps sqrt(n) max|x|
STEPS = 20
B, T_ATTN, H, K = 2, 48, 4, 8


def mesh_of(sizes: dict[str, int]) -> jax.sharding.Mesh:
    shape = tuple(sizes.get(a, 1) for a in MESH_AXES)
    devices = jax.devices()[: math.prod(shape)]
    return jax.make_mesh(shape, MESH_AXES, (AxisType.Auto,) * len(MESH_AXES), devices=devices)


def sizes_of(text: str, names: tuple[str, ...]) -> dict[str, int]:
    return dict(zip(names, (int(s) for s in text.split(",")), strict=True))


def rows_spec(sizes: dict[str, int]) -> tuple[str, ...] | None:
    rows = tuple(a for a in ("data", "fsdp", "expert") if sizes.get(a, 1) > 1)
    return rows or None


# ---------------------------------------------------------------------- attention kernel


def segments(T: int) -> np.ndarray:
    """Row 0: documents starting at 13 and 29 (inside chunks, so documents cross the chunk
    boundaries); row 1: one document and a padded tail from 40."""
    seg = np.ones((B, T), np.int32)
    seg[0, 13:], seg[0, 29:] = 2, 3
    seg[1, 40:] = 0
    return seg


def oracle(q, k, v, seg, window: int):
    """softmax(q k^T / sqrt(K) + mask) v over the whole sequence, the stages written out."""
    G = k.shape[1]
    R = q.shape[1] // G
    kk, vv = jnp.repeat(k, R, axis=1), jnp.repeat(v, R, axis=1)
    s = jnp.einsum("bhqk,bhsk->bhqs", q * K**-0.5, kk)
    pos = jnp.arange(q.shape[2])
    allowed = (pos[None, :] <= pos[:, None])[None] & (seg[:, :, None] == seg[:, None, :])
    if window:
        allowed &= (pos[:, None] - pos[None, :] < window)[None]
    s = jnp.where(allowed[:, None], s, -1e30)
    p = jnp.where(allowed[:, None], jax.nn.softmax(s, axis=-1), 0.0)
    return jnp.einsum("bhqs,bhsk->bhqk", p, vv)


@cache
def oracle_case(kv_heads: int, window: int) -> tuple[Any, ...]:
    """A case's inputs (q, k, v, the output weights w, segments) and the oracle's output and
    gradients on one device: the same for every method, order and mesh, so computed (and
    compiled) once per case in this process, not once per scenario."""
    T = T_ATTN
    keys = jax.random.split(jax.random.key(kv_heads + window), 4)
    q = jax.random.normal(keys[0], (B, H, T, K))
    k, v = (jax.random.normal(keys[i], (B, kv_heads, T, K)) for i in (1, 2))
    w = jax.random.normal(keys[3], (B, H, T, K))  # every output weighted differently
    seg = jnp.asarray(segments(T))

    def reference(q, k, v):
        return jnp.sum(oracle(q, k, v, seg, window) * w)

    want_out = jax.jit(oracle, static_argnums=4)(q, k, v, seg, window)
    want = jax.jit(jax.grad(reference, argnums=(0, 1, 2)))(q, k, v)
    return q, k, v, w, seg, want_out, want


def attention_case(
    method: str,
    order: str,
    sizes: dict[str, int],
    kv_heads: int,
    window: int,
    data_order: str | None = None,
) -> list[float]:
    """Error / tolerance of out, dq, dk, dv; the rows are laid out in ``data_order`` (by
    default the order attention is told)."""
    from theseus.models.layers.context_attention import context_attention

    mesh, devices = mesh_of(sizes), sizes["context"]
    T = T_ATTN
    q, k, v, w, seg, want_out, want = oracle_case(kv_heads, window)
    perm = layout_order(T, devices, data_order or order)
    inverse = np.argsort(perm)
    rows = rows_spec(sizes)
    x_sharding = NamedSharding(mesh, PartitionSpec(rows, None, "context"))
    seg_sharding = NamedSharding(mesh, PartitionSpec(rows, "context"))

    def split(q, k, v, s, w):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            out = context_attention(
                q, k, v, s, s, method=method, order=order, sizes=sizes, window=window, block=4
            )
        return jnp.sum(out * w), out

    run = jax.jit(
        jax.value_and_grad(split, argnums=(0, 1, 2), has_aux=True),
        in_shardings=(x_sharding, x_sharding, x_sharding, seg_sharding, x_sharding),
    )
    (_, out), grads = run(*(x[:, :, perm] for x in (q, k, v)), seg[:, perm], w[:, :, perm])
    got = [np.asarray(out)[:, :, inverse], *(np.asarray(g)[:, :, inverse] for g in grads)]
    # n terms per sum: an output row sums over <= T keys; dq over T keys; dk and dv over the
    # T queries of each of the R query heads sharing the kv head
    terms = [T, T, T * H // kv_heads, T * H // kv_heads]
    ratios = []
    for got_x, want_x, n in zip(got, [want_out, *want], terms, strict=True):
        want_x = np.asarray(want_x)
        tolerance = MARGIN * EPS * math.sqrt(n) * float(np.abs(want_x).max())
        finite = bool(np.isfinite(got_x).all())
        ratios.append(float(np.abs(got_x - want_x).max()) / tolerance if finite else math.inf)
    return ratios


ATTENTION_CASES = {"packed-gqa": (2, 0), "packed-window-mqa": (1, 7)}


def attention_scenario(text: str) -> dict:
    _, method, order, mesh_text = text.split(":")
    sizes = sizes_of(mesh_text, ("data", "fsdp", "context"))
    result = {}
    for name, (kv_heads, window) in ATTENTION_CASES.items():
        out, dq, dk, dv = attention_case(method, order, sizes, kv_heads, window)
        result[name] = {"out": out, "dq": dq, "dk": dk, "dv": dv}
    return {"ratio": max(max(r.values()) for r in result.values()), "cases": result}


@contextmanager
def boundary_leak() -> Iterator[None]:
    """Between different chunks, queries believe they sit one position later: at each chunk
    boundary the last query of a chunk sees the first key of the next (a one-token leak)."""
    import theseus.models.layers.context_attention as module

    originals = module.accumulate, module.pair_gradients

    def off_by_one(shift):
        return jnp.where(shift != 0, shift + 1, shift)

    module.accumulate = lambda *a: originals[0](*a[:-1], off_by_one(a[-1]))
    module.pair_gradients = lambda *a: originals[1](*a[:-1], off_by_one(a[-1]))
    try:
        yield
    finally:
        module.accumulate, module.pair_gradients = originals


def mutant_scenario(text: str) -> dict:
    """The comparison of ``attention_scenario`` with a mask error at the chunk boundaries."""
    kind = text.split(":")[1]
    sizes = {"context": 4}
    if kind == "order":  # rows in zigzag layout, attention told they are contiguous
        return {"ratio": max(attention_case("ring", "contiguous", sizes, 2, 0, "zigzag"))}
    with boundary_leak():
        return {"ratio": max(attention_case("ring", "zigzag", sizes, 2, 0))}


# ---------------------------------------------------------------------- experts


def option_value(options: list[str], name: str) -> float | None:
    """``F`` of ``name=F`` among the options, 0 for a bare ``name``, None without it."""
    for option in options:
        key, _, value = option.partition("=")
        if key == name:
            return float(value or 0)
    return None


def moe_layer(options: list[str], execution: Any = None):
    """The layer, built in ``execution`` (a plan of a mesh; none: one device)."""
    from theseus.models.layers.moe import MoE

    grouping = next((g for g in ("ragged_dot", "grouped") if g in options), "tiles")
    factor = option_value(options, "capacity") or 0.0
    moe = MoE(
        16,
        8,
        8,
        2,
        capacity_factor=factor,
        grouping=grouping,
        execution=execution,
        rngs=nnx.Rngs(0),
    )
    if "unbalanced" in options:  # with x[..., 0] = 3 (moe_scenario), expert 3's logit gains 30
        moe.router.kernel[...] = moe.router.kernel[...].at[0, 3].add(10.0)
    return moe


EXPERT_SPECS = {"w_gate": ("expert", "fsdp"), "w_up": ("expert", "fsdp")}
EXPERT_SPECS["w_down"] = ("expert", None, "fsdp")


MOE_REFERENCES: dict[tuple[Any, ...], Any] = {}  # moe_scenario's one-device results


def moe_scenario(text: str) -> dict:
    """Outputs, gradients and router statistics of the layer split over ``expert``."""
    from theseus.core.execution import ExecutionPlan
    from theseus.core.sharding.placement import path_name
    from theseus.core.train.execution_choice import expert_routing

    _, mesh_text, *rest = text.split(":")
    options = rest[0].split("+") if rest else []
    option = rest[0] if rest else ""
    sizes = sizes_of(mesh_text, ("data", "fsdp", "expert", "tensor"))
    mesh = mesh_of(sizes)
    moe = moe_layer(options)  # on one device: the whole batch routed at once
    room = option_value(options, "ragged")
    # as a setup's plan would say (on CPU, the ragged exchange runs from an all-gather)
    plan = ExecutionPlan(
        experts=expert_routing(sizes, has_experts=True),
        expert_capacity=room or 0.0,
        expert_dispatch="slabs" if room is None else "ragged_gathered",
        mesh_axes=tuple((a, sizes.get(a, 1)) for a in MESH_AXES),
    )
    split_graphdef = nnx.split(moe_layer(options, plan))[0]
    x = jax.random.normal(jax.random.key(1), (8, 6, 16))
    if "unbalanced" in options:  # every token's first choice: expert 3 (see moe_layer)
        x = x.at[..., 0].set(3.0)
    valid = jnp.ones((8, 6), bool).at[0, 4:].set(False)
    graphdef, params = nnx.split(moe)
    w = jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape)
    # the ragged dispatch sends no padding token (their outputs are zero): a loss masked as
    # in training, outputs compared on the valid tokens
    seen = valid[..., None] if room is not None else jnp.ones_like(valid)[..., None]
    w = w * seen

    def loss(params, x, valid, w, graphdef=graphdef):
        y, stats = nnx.merge(graphdef, params).forward_with_stats(x, valid)
        return jnp.sum(y * w), (y, stats)

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    groups = math.prod(sizes[a] for a in ("data", "fsdp", "expert"))
    if option.startswith("capacity="):  # the one-device layer on each device's tokens alone
        pieces = [jnp.split(a, groups) for a in (x, valid, w)]
        parts = [grad(params, *piece) for piece in zip(*pieces, strict=True)]
        y_ref = jnp.concatenate([p[0][1][0] for p in parts])
        gx_ref = jnp.concatenate([p[1][1] for p in parts])
        g_ref = jax.tree.map(lambda *g: sum(g), *[p[1][0] for p in parts])
        asked = [float(jnp.sum(vs)) for vs in jnp.split(valid, groups)]
        kept = [
            (1 - float(p[0][1][1]["drop_fraction"])) * a for p, a in zip(parts, asked, strict=True)
        ]
        stats_ref, drop_ref = None, 1 - sum(kept) / sum(asked)
    else:
        # the one-device layer sees only the layer's options and whether the loss is masked
        # (the ragged room is the split layer's): scenarios that differ in their mesh or
        # room alone share one reference, computed and compiled once in this process
        key = (*(o for o in options if o.partition("=")[0] != "ragged"), room is None)
        if key not in MOE_REFERENCES:
            MOE_REFERENCES[key] = grad(params, x, valid, w)
        (_, (y_ref, stats_ref)), (g_ref, gx_ref) = MOE_REFERENCES[key]
        drop_ref = float(stats_ref["drop_fraction"])

    def split(params, x, valid, w):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            split_loss = partial(loss, graphdef=split_graphdef)
            return jax.value_and_grad(split_loss, argnums=(0, 1), has_aux=True)(params, x, valid, w)

    def weight_sharding(path, _):
        spec = EXPERT_SPECS.get(path_name(path).split(".")[-1], ())
        spec = tuple(a if a and sizes.get(a, 1) > 1 else None for a in spec)
        return NamedSharding(mesh, PartitionSpec(*spec))

    shardings = jax.tree_util.tree_map_with_path(weight_sharding, params)
    token_sharding = NamedSharding(mesh, PartitionSpec(rows_spec(sizes)))
    run = jax.jit(split, in_shardings=(shardings, token_sharding, token_sharding, token_sharding))
    (_, (y, stats)), (g, gx) = run(params, x, valid, w)
    pairs = zip(jax.tree.leaves(g), jax.tree.leaves(g_ref), strict=True)
    out = {
        "y": rel(y * seen, y_ref * seen),
        "dx": rel(gx, gx_ref),
        "dparams": max(rel(a, b) for a, b in pairs),
        "drop_fraction": float(stats["drop_fraction"]),
        "drop_fraction_ref": drop_ref,
    }
    if stats_ref is not None:
        out["router"] = max(rel(stats[n], stats_ref[n]) for n in ("counts", "prob_sums", "tokens"))
        counts = np.asarray(stats["counts"])
        out["busiest_expert_share"] = float(counts.max() / counts.sum())  # k = 2: at most 1/2
        out["counts_equal"] = bool(np.array_equal(counts, np.asarray(stats_ref["counts"])))
    if room:
        top_e = np.asarray(moe.route(x)[1]).reshape(groups, -1, moe.k)
        valid_groups = np.asarray(valid).reshape(groups, -1)
        out["drop_fraction_rule"] = ragged_drops(top_e, valid_groups, sizes, room)
    return out


def ragged_drops(top_e, valid, sizes: dict[str, int], factor: float) -> float:
    """The drop fraction of the ragged dispatch's rule, counted one row at a time: each device
    (a group of ``sizes``' token axes) sends its valid assignments, by expert and first
    choices first within one, to the device of their expert; a receiver takes them in sender order into room for
    L x C rows, and each of its L experts keeps the first C = ceil(f n k / L) that arrive."""
    groups, n, k = top_e.shape
    devices, experts = sizes["expert"], 8  # the layer of moe_layer has 8 experts
    local = experts // devices
    capacity = math.ceil(factor * n * k / local)
    arrived = [[] for _ in range(groups)]  # each receiver's rows: their experts, in order
    asked = 0
    for group in range(groups):  # the expert axis is the innermost token axis
        replica = group // devices
        sent = [(top_e[group, t, c], c, t) for c in range(k) for t in range(n) if valid[group, t]]
        asked += len(sent)
        for expert, _, _ in sorted(sent, key=lambda row: row[0]):  # stable, by expert
            receiver = replica * devices + expert // local
            if len(arrived[receiver]) < local * capacity:
                arrived[receiver].append(expert)
    kept = sum(min(rows.count(e), capacity) for rows in arrived for e in sorted(set(rows)))
    return 1 - kept / asked


def rel(a, b) -> float:
    """max |a - b| / max |b| (0 when both are 0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = float(np.abs(b).max())
    return float(np.abs(a - b).max()) / scale if scale else float(np.abs(a).max())


# ---------------------------------------------------------------------- training


MODELS = {
    # GQA (4 heads over 2 kv heads), a sliding window that crosses the chunks, RoPE
    "llama": ("llama/train/pretrain", ["model.preset=tiny", "model.sliding_window=11"]),
    "qwen3_moe": ("qwen3_moe/train/pretrain", ["model.preset=tiny"]),
}
SEQ, ROWS, VOCAB = 32, 8, 128


def setup_for(model: str, sizes: dict[str, int], method: str, devices: list):
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    key, overrides = MODELS[model]
    regs = registries()
    strategy = "fsdp" if sizes.get("fsdp", 1) > 1 else "dp"
    overrides = [
        *overrides,
        f"model.max_seq_len={SEQ}",
        f"training.seq_len={SEQ}",
        f"training.global_batch_size={ROWS}",
        f"model.vocab_size={VOCAB}",
        "optimizer.name=sgd",
        "optimizer.learning_rate=0.5",
        "schedule.name=constant",
        f"sharding.strategy={strategy}",
        f"sharding.context_attention={method}",
        # the dropless dispatch (the default, set here so that the split run follows the
        # unsplit one exactly whatever the default becomes)
        "sharding.expert_capacity=0",
        *(
            f"sharding.{axis}={sizes.get(axis, 1)}"
            for axis in ("data", "fsdp", "expert", "context")
        ),
    ]
    tree = config_for(job_spec(key, regs), regs, overrides)
    config = tree.to_object(TrainJobConfig)
    return TrainSetup.build(config, regs, VOCAB, layout=Layout(config.sharding, devices))


def batch_of(step: int) -> dict[str, np.ndarray]:
    """Packed rows of 3 documents each (boundaries at random places, inside the context
    chunks); a document counts on from a random start (t -> (5 t + 7) mod V), something a
    tiny model learns in a few steps, so the losses fall."""
    rng = np.random.default_rng(step)
    seg = np.ones((ROWS, SEQ + 1), np.int32)
    tokens = np.zeros((ROWS, SEQ + 1), np.int32)
    for row in range(ROWS):
        for cut in sorted(rng.choice(np.arange(3, SEQ - 2), 2, replace=False)):
            seg[row, cut:] += 1
        for t in range(SEQ + 1):
            first = t == 0 or seg[row, t] != seg[row, t - 1]
            tokens[row, t] = rng.integers(VOCAB) if first else (5 * tokens[row, t - 1] + 7) % VOCAB
    positions = np.zeros((ROWS, SEQ), np.int32)
    for t in range(1, SEQ):
        positions[:, t] = np.where(seg[:, t] == seg[:, t - 1], positions[:, t - 1] + 1, 0)
    # a target in another document than its input is not predicted
    mask = (seg[:, 1:] == seg[:, :-1]).astype(np.float32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": positions,
        "segment_ids": seg[:, :-1],
        "loss_mask": mask,
    }


def losses_of(setup) -> list[float]:
    state = setup.init_state()
    losses = []
    for step in range(STEPS):
        state, metrics = setup.train_step(state, setup.layout.place_batch(batch_of(step)))
        losses.append(float(metrics["loss"]))
    return losses


def collectives(setup) -> dict[str, int]:
    """Collective ops of the compiled train step (the persistent compilation cache has it)."""
    text = setup.train_step.lower(setup.abstract_state, setup.abstract_batch()).compile().as_text()
    names = ("all-gather", "all-reduce", "collective-permute", "all-to-all", "reduce-scatter")
    return {n: len(re.findall(rf" {n}(?:-start)?\(", text)) for n in names}


def train_scenario(text: str, references: dict[str, list[float]]) -> dict:
    """``train:MODEL:data,fsdp,expert,context[:METHOD[:mutant]]``."""
    from theseus.core.sharding.placement import path_name

    _, model, mesh_text, *rest = text.split(":")
    method = rest[0] if rest else "ring"
    sizes = sizes_of(mesh_text, ("data", "fsdp", "expert", "context"))
    if model not in references:
        references[model] = losses_of(setup_for(model, {}, "ring", jax.devices()[:1]))
    devices = jax.devices()[: math.prod(sizes.values())]
    if rest[1:] == ["mutant"]:  # the chunk-boundary leak of mutant_scenario, in training
        with boundary_leak():
            losses = losses_of(setup_for(model, sizes, method, devices))
        return {"losses": losses, "reference": references[model]}
    setup = setup_for(model, sizes, method, devices)
    specs = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(setup.abstract_state.params)[0]:
        name = path_name(path).split(".")[-1]
        if name in EXPERT_SPECS:
            specs[name] = [list(p) if isinstance(p, tuple) else p for p in leaf.sharding.spec]
    return {
        "losses": losses_of(setup),
        "reference": references[model],
        "attention": setup.attention,
        "expert_specs": specs,
        "collectives": collectives(setup),
    }


def main(scenarios: list[str]) -> None:
    import time

    references: dict[str, list[float]] = {}
    for text in scenarios:
        started = time.perf_counter()
        kind = text.split(":")[0]
        if kind == "attn":
            result = attention_scenario(text)
        elif kind == "mutant":
            result = mutant_scenario(text)
        elif kind == "moe":
            result = moe_scenario(text)
        else:
            result = train_scenario(text, references)
        seconds = round(time.perf_counter() - started, 2)
        print(json.dumps({"scenario": text, "seconds": seconds, **result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
