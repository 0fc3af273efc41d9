"""Is splash attention's time set by its matrix products or by its scores? On a TPU, the
forward and backward of the kernel at one shape (B rows x T tokens, 16 query heads over 8
key/value heads, the mixture shape's) timed at several head dims with the blocks the
measured table gives. The products grow with the head dim; the scores (the softmax's
elementwise work, B x H x T^2 / 2) do not. Time that hardly moves with the head dim is
time spent per score, and at head dim 64 the kernel then runs at half the rate it reaches
at 128 whatever its blocks.

    python bench/attention_per_score.py OUT.json [HEAD_DIM ...]   # on the TPU
    SWEEP_REPEATS=1 JAX_PLATFORMS=cpu python bench/attention_per_score.py x.json --tiny
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from functools import partial

from tpu_attention_sweep import measure, splash_kernel

HEADS = (16, 8)  # query heads, key/value heads (the mixture shape's)
HEAD_DIMS = (64, 128)


def run(rows: int, length: int, head_dims: tuple[int, ...] = HEAD_DIMS) -> dict:
    import jax
    import jax.numpy as jnp
    from theseus.models.splash_blocks import splash_blocks

    device = jax.devices()[0]
    interpret = jax.default_backend() != "tpu"
    H, G = HEADS
    found = []
    for head_dim in head_dims:
        keys = jax.random.split(jax.random.key(head_dim), 4)
        q, d = (jax.random.normal(k, (rows, H, length, head_dim), jnp.bfloat16) for k in keys[::3])
        k, v = (jax.random.normal(k, (rows, G, length, head_dim), jnp.bfloat16) for k in keys[1:3])
        seg = jnp.ones((rows, length), jnp.int32)
        scores = rows * H * length * length / 2  # the causal half
        flops = 4 * scores * head_dim * 3.5  # forward 2 products, backward 2.5 times that
        blocks = splash_blocks(device.device_kind, length, head_dim)
        row = {"head_dim": head_dim, "blocks": asdict(blocks)}
        row.update(measure(partial(splash_kernel, blocks, interpret), (q, k, v, seg, d), flops))
        if "seconds" in row:
            row["ns_per_score"] = row["seconds"] / scores * 1e9
        found.append(row)
        print(json.dumps(row), flush=True)
    return {
        "device": device.device_kind,
        "jax": jax.__version__,
        "rows": rows,
        "seq_len": length,
        "heads": list(HEADS),
        "results": found,
    }


def main() -> None:
    tiny = "--tiny" in sys.argv
    dims = tuple(int(a) for a in sys.argv[2:] if a.isdigit()) or HEAD_DIMS
    result = run(1, 256, dims) if tiny else run(8, 2048, dims)
    with open(sys.argv[1], "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
