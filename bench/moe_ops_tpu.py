"""A mixture layer's pieces timed alone on the chip: where a dropless MoE step's time can go.

At the Mixtral-style bench shape (8 x 2048 tokens, d_model 1024, 8 experts of 1024, top-2):
a dense matmul of the routed rows (the rate to beat), ``ragged_dot`` forward and each of its
two gradients, the tiles' batched matmul, the gather that builds the routed rows and its
gradient (a scatter-add unless told otherwise), the sort, and the whole layer's forward and
backward per grouping. Each figure is the median of repeated calls of a jitted function.

    python bench/moe_ops_tpu.py OUT.json          # on the TPU (bench/tpu_device.sh moe)
    MOE_OPS_SMALL=1 python bench/moe_ops_tpu.py x.json   # a CPU smoke run
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from tpu_attention_sweep import timed as sweep_timed  # noqa: E402

SMALL = bool(os.environ.get("MOE_OPS_SMALL"))
N, D, F, E, K = (512, 128, 128, 8, 2) if SMALL else (16384, 1024, 1024, 8, 2)
M = N * K


def timed(fn: Callable, *args) -> float:
    """The median of the sweep's repeats of ``fn`` compiled once (``tpu_attention_sweep``)."""
    return sweep_timed(jax.jit(fn).lower(*args).compile(), *args)


def routing(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Top-2 of a random router: (expert_M, sizes_E), assignments in k-major order."""
    logits = jax.random.normal(key, (N, E))
    top_e = jax.lax.top_k(logits, K)[1]
    expert_M = top_e.T.reshape(M).astype(jnp.int32)
    return expert_M, jnp.bincount(expert_M, length=E).astype(jnp.int32)


def cases() -> dict[str, tuple[Callable, tuple, float]]:
    """name -> (function, arguments, FLOPs it does for its result)."""
    keys = jax.random.split(jax.random.key(0), 6)
    bf16 = jnp.bfloat16
    x_NxD = jax.random.normal(keys[0], (N, D), bf16)
    x_MxD = jax.random.normal(keys[1], (M, D), bf16)
    dy_MxF = jax.random.normal(keys[2], (M, F), bf16)
    w_ExDxF = jax.random.normal(keys[3], (E, D, F), bf16) * 0.02
    w_DxF = w_ExDxF[0]
    expert_M, sizes_E = routing(keys[4])
    order_M = jnp.argsort(expert_M, stable=True).astype(jnp.int32)
    token_M = order_M % N
    matmul_flops = 2.0 * M * D * F

    def ragged(x, w):
        return jax.lax.ragged_dot(x, w, sizes_E)

    def ragged_dlhs(x, w, dy):
        return jax.vjp(lambda a: ragged(a, w), x)[1](dy)[0]

    def ragged_drhs(x, w, dy):
        return jax.vjp(lambda b: ragged(x, b), w)[1](dy)[0]

    def grouped_drhs(x, dy):
        from theseus.models.layers.grouped_matmul import grouped_weight_gradient

        return grouped_weight_gradient(x, dy, sizes_E, interpret=SMALL)

    tile = 512
    G = (M + E * (tile - 1)) // tile
    tile_expert_G = jnp.minimum(jnp.arange(G) * E // G, E - 1).astype(jnp.int32)
    x_GxCxD = jnp.zeros((G * tile, D), bf16).at[:M].set(x_MxD).reshape(G, tile, D)

    def tiles(x, w):
        return jnp.einsum("gcd,gdf->gcf", x, jnp.take(w, tile_expert_G, axis=0))

    def tiles_grads(x, w, dy):
        return jax.vjp(tiles, x, w)[1](dy)

    dy_GxCxF = jnp.zeros((G * tile, F), bf16).at[:M].set(dy_MxF).reshape(G, tile, F)

    def gather(x):
        return jnp.take(x, token_M, axis=0)

    def gather_grad(x, dy):
        return jax.vjp(gather, x)[1](dy)[0]

    def layer(grouping: str) -> Callable:
        from flax import nnx
        from theseus.models.layers.moe import MoE

        moe = MoE(D, F, E, K, grouping=grouping, dtype=bf16, rngs=nnx.Rngs(0))
        graph, params = nnx.split(moe)

        def loss(params, x):
            return jnp.sum(nnx.merge(graph, params)(x[None]).astype(jnp.float32))

        return lambda params, x: jax.grad(loss, argnums=(0, 1))(params, x), params

    ragged_layer, params = layer("ragged_dot")
    tiles_layer, _ = layer("tiles")
    grouped_layer, _ = layer("grouped")
    layer_flops = 3 * 3 * matmul_flops
    return {
        "dense_matmul": (lambda x, w: x @ w, (x_MxD, w_DxF), matmul_flops),
        "ragged_dot": (ragged, (x_MxD, w_ExDxF), matmul_flops),
        "ragged_dot_dlhs": (ragged_dlhs, (x_MxD, w_ExDxF, dy_MxF), matmul_flops),
        "ragged_dot_drhs": (ragged_drhs, (x_MxD, w_ExDxF, dy_MxF), matmul_flops),
        "grouped_drhs": (grouped_drhs, (x_MxD, dy_MxF), matmul_flops),
        "tiles_matmul": (tiles, (x_GxCxD, w_ExDxF), matmul_flops),
        "tiles_grads": (tiles_grads, (x_GxCxD, w_ExDxF, dy_GxCxF), 2 * matmul_flops),
        "gather_rows": (gather, (x_NxD,), 0.0),
        "gather_rows_grad": (gather_grad, (x_NxD, x_MxD), 0.0),
        "argsort": (lambda e: jnp.argsort(e, stable=True), (expert_M,), 0.0),
        "layer_ragged_dot_fwd_bwd": (ragged_layer, (params, x_NxD), layer_flops),
        "layer_tiles_fwd_bwd": (tiles_layer, (params, x_NxD), layer_flops),
        "layer_grouped_fwd_bwd": (grouped_layer, (params, x_NxD), layer_flops),
    }


def main() -> None:
    out = sys.argv[1]
    report: dict = {"device": jax.devices()[0].device_kind, "shape": [N, D, F, E, K], "ops": {}}
    for name, (fn, args, flops) in cases().items():
        try:
            seconds = timed(fn, *args)
            row = {"ms": round(seconds * 1e3, 4)}
            if flops:
                row["tflops"] = round(flops / seconds / 1e12, 2)
        except Exception as error:  # a refused lowering is a result too
            row = {"error": str(error).splitlines()[0][:300]}
        report["ops"][name] = row
        print(name, json.dumps(row), flush=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
