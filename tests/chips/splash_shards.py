"""Scenario (8 simulated CPU devices): the splash kernel per shard, run by the Pallas
interpreter, against the reference attention on one device, under every strategy.

For each strategy the attention layer's parameters are laid out by that strategy's rules,
the batch is split over its batch axes, and the layer runs jitted under ``jax.set_mesh`` --
as in a training step -- so splash goes through ``shard_map`` (rows over data/fsdp, heads
over tensor). Prints one JSON line per strategy: the largest error of the output and of
the gradients (input and every parameter), and the tolerance each is held to.
Usage: python -m tests.chips.splash_shards
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.core.execution import AttentionKernel, ExecutionPlan
from theseus.core.sharding.config import ShardingConfig
from theseus.core.sharding.placement import Layout
from theseus.models.layers.attention import Attention, MaskInfo
from theseus.models.layers.rope import RoPE

B, T, D, H, G, K = 8, 128, 64, 4, 2, 32  # GQA: two query heads per kv head
EPS = float(np.finfo(np.float32).eps)
MARGIN = 2.0  # as tests/models/test_attention_impls.py: eps * sqrt(n) * max|x|, times 2
STRATEGIES = {
    "dp": ShardingConfig(strategy="dp", data=8),
    "fsdp": ShardingConfig(strategy="fsdp", fsdp=8),
    "tp": ShardingConfig(strategy="tp", data=4, tensor=2),
    "fsdp+tp": ShardingConfig(strategy="fsdp+tp", data=1, fsdp=4, tensor=2),
}


def make_layer(impl: str, layout: Layout | None = None) -> Attention:
    """The layer running ``impl``; with ``layout``, planned for its mesh (the kernel per shard
    of it, as a setup's plan says)."""
    plan = None
    if layout is not None:
        plan = ExecutionPlan(attention=AttentionKernel(impl), mesh_axes=tuple(layout.sizes.items()))
    layer = Attention(
        D,
        H,
        G,
        K,
        rope=RoPE(K, 10000.0),
        implementation=impl,
        execution=plan,
        rngs=nnx.Rngs(0),
    )
    layer.kernel_interpret = True
    layer.query_block = 0  # the reference over the whole square: the plainest oracle
    return layer


def mask_info() -> MaskInfo:
    """Every row packs two documents, the second of row r starting at 16 + 8 r; rows 0 and
    5 end in padding (segment 0): segment ids must travel with their rows."""
    seg = np.ones((B, T), np.int32)
    for row in range(B):
        seg[row, 16 + 8 * row :] = 2
    seg[0, T - 20 :] = 0
    seg[5, T - 7 :] = 0
    slot = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    return MaskInfo(slot, slot, jnp.asarray(seg), jnp.asarray(seg))


def output_and_grads(layer: Attention, x, info: MaskInfo, layout: Layout | None):
    graphdef, state = nnx.split(layer)
    w = jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape)

    def run(x, state, info):
        def loss(x, state):
            out, _ = nnx.merge(graphdef, state)(x, info.q_slot, info)
            return jnp.sum(out * w), out

        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(x, state)
        return out, grads

    if layout is None:
        return jax.jit(run)(x, state, info)
    rows = layout.batch_sharding
    params = layout.shardings(layout.param_specs(state))
    info_shardings = MaskInfo(rows, rows, rows, rows)
    jitted = layout.jit(run, in_shardings=(rows, params, info_shardings))
    return jitted(jax.device_put(x, rows), jax.device_put(state, params), info)


def main() -> None:
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    info = mask_info()
    want = output_and_grads(make_layer("reference"), x, info, None)
    for name, config in STRATEGIES.items():
        layout = Layout(config)
        got = output_and_grads(make_layer("splash", layout), x, info, layout)
        planned = make_layer("splash", layout)
        with jax.set_mesh(layout.mesh):  # did the kernel go through shard_map?
            traced = jax.make_jaxpr(lambda x, layer=planned: layer(x, info.q_slot, info)[0])(x)
        result = {"strategy": name, "mesh": dict(layout.mesh.shape)}
        result["per_shard"] = "shard_map" in str(traced)
        for kind, g, w, n in [("out", got[0], want[0], T)] + [
            ("grad", g, w, B * T * H)
            for g, w in zip(*map(jax.tree.leaves, (got[1], want[1])), strict=True)
        ]:
            g, w = np.asarray(g), np.asarray(w)
            error = float(np.abs(g - w).max()) if np.isfinite(g).all() else float("inf")
            tolerance = MARGIN * EPS * np.sqrt(n) * float(np.abs(w).max())
            worst = result.get(kind, {"error": 0.0, "tolerance": 1.0})
            if error / tolerance >= worst["error"] / worst["tolerance"]:
                result[kind] = {"error": error, "tolerance": tolerance}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
