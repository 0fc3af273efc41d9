"""Splash attention's block sizes on a TPU: forward + backward time per candidate and length.

For head dims 64 (16 query and 16 key/value heads) and 128 (16 and 8, grouped) and lengths
512-32768 (rows x length = 16,384 tokens, at least one row), times the kernel's forward and
backward (``jax.value_and_grad`` of a weighted sum of its output) for each candidate block
set, and XLA's reference attention where its scores fit. TFLOP/s count the causal half of
the square: forward ``2 * 2 * B * H * T^2 / 2 * K``, backward 2.5 times that.

    python bench/tpu_attention_sweep.py OUT.json          # on the TPU (bench/tpu_device.sh)
        # also writes the chip's fastest blocks and their rates into theseus-core's
        # chips/measured.json, which the splash kernel and the step estimate read
    SWEEP_LENGTHS=256 SWEEP_REPEATS=1 JAX_PLATFORMS=cpu python bench/tpu_attention_sweep.py x.json
        # a CPU smoke run in the Pallas interpreter
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

LENGTHS = [
    int(t)
    for t in os.environ.get("SWEEP_LENGTHS", "512,1024,2048,4096,8192,16384,32768").split(",")
]
HEAD_DIMS = {64: (16, 16), 128: (16, 8)}  # head_dim -> (query heads, key/value heads)
DIMS = [int(d) for d in os.environ.get("SWEEP_DIMS", "64,128").split(",")]
TOKENS = int(os.environ.get("SWEEP_TOKENS", "16384"))
REPEATS = int(os.environ.get("SWEEP_REPEATS", "5"))
REFERENCE_MAX_LEN = 4096  # XLA attention materialises every score: measured up to here


def candidates(length: int):
    from theseus.models.splash_blocks import SplashBlocks

    def square(n: int, compute: int | None = None, fused: bool = False) -> SplashBlocks:
        c = compute or n
        dq = {} if fused else dict(q_dq=n, kv_dq=n)
        return SplashBlocks(n, n, c, n, n, c, **dq, fused_bwd=fused)

    found = [square(128), square(512), square(512, fused=True)]
    found += [square(1024, 512), square(1024, 512, fused=True), square(1024)]
    found += [SplashBlocks(512, 1024, 512, 512, 1024, 512, 512, 1024)]
    found += [SplashBlocks(1024, 2048, 512, 1024, 2048, 512, 1024, 2048)]
    found += [square(2048, 512)]
    unique = []
    for blocks in found:
        clamped = blocks.clamped(length)
        if clamped not in unique and max(blocks.q, blocks.kv) <= length:
            unique.append(clamped)
    return unique


def timed(fn, *args) -> float:
    import jax

    out = fn(*args)
    jax.block_until_ready(out)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def splash_kernel(blocks, interpret: bool, q, k, v, seg):
    from theseus.models.layers.splash_attention import splash_attention

    return splash_attention(q, k, v, seg, seg, blocks=blocks, interpret=interpret)


def xla_attention(q, k, v, seg):
    """Causal attention by XLA (what ``model.attention=reference`` computes), BxHxTxK."""
    import jax
    import jax.numpy as jnp

    B, H, T, K = q.shape
    scale = K**-0.5
    G = k.shape[1]
    qg = (q * scale).reshape(B, G, H // G * T, K)
    s = jnp.einsum("bgmk,bgsk->bgms", qg, k, preferred_element_type=jnp.float32)
    s = s.reshape(B, G, H // G, T, T)
    causal = jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]
    p = jax.nn.softmax(jnp.where(causal, s, -1e30), axis=-1).astype(q.dtype)
    out = jnp.einsum("bgms,bgsk->bgmk", p.reshape(B, G, H // G * T, T), v)
    return out.reshape(B, H, T, K)


def measure(attend, args, flops: float) -> dict:
    """Seconds and TFLOP/s of ``attend``'s forward and backward, or the error it raised."""
    import jax
    import jax.numpy as jnp

    def loss(q, k, v, seg, d):
        return jnp.sum(attend(q, k, v, seg).astype(jnp.float32) * d)

    try:
        seconds = timed(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))), *args)
    except Exception as error:  # a block set the kernel or the chip refuses
        return {"error": str(error).splitlines()[0][:200]}
    return {"seconds": seconds, "tflops": flops / seconds / 1e12}


def run(path: str) -> dict:
    import jax
    import jax.numpy as jnp

    interpret = jax.default_backend() != "tpu"
    rows_out = []
    for head_dim in DIMS:
        H, G = HEAD_DIMS[head_dim]
        for T in LENGTHS:
            B = max(1, TOKENS // T)
            key = jax.random.key(T + head_dim)
            kq, kk, kv, kd = jax.random.split(key, 4)
            q = jax.random.normal(kq, (B, H, T, head_dim), jnp.bfloat16)
            k = jax.random.normal(kk, (B, G, T, head_dim), jnp.bfloat16)
            v = jax.random.normal(kv, (B, G, T, head_dim), jnp.bfloat16)
            d = jax.random.normal(kd, (B, H, T, head_dim), jnp.bfloat16)
            seg = jnp.ones((B, T), jnp.int32)
            flops = 4 * B * H * T * T / 2 * head_dim * 3.5

            args = (q, k, v, seg, d)
            for blocks in candidates(T):
                row = {"head_dim": head_dim, "seq_len": T, "rows": B, "heads": [H, G]}
                row["blocks"] = asdict(blocks)
                row.update(measure(partial(splash_kernel, blocks, interpret), args, flops))
                rows_out.append(row)
                print(json.dumps(row), flush=True)
            if T <= REFERENCE_MAX_LEN:
                row = {"head_dim": head_dim, "seq_len": T, "rows": B, "heads": [H, G]}
                row["blocks"] = "reference (XLA)"
                row.update(measure(xla_attention, args, flops))
                rows_out.append(row)
                print(json.dumps(row), flush=True)
            write(path, rows_out)
    return write(path, rows_out)


def write(path: str, rows: list[dict]) -> dict:
    """The sweep so far, written after every length (a run cut short keeps what it measured)."""
    import jax

    result = {
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "tokens_per_call": TOKENS,
        "rows": rows,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return result


# ---------------------------------------------------------------------- the tables theseus reads

MEASURED_FILE = (
    Path(__file__).resolve().parents[1]
    / "packages/theseus-core/src/theseus/core/chips/measured.json"
)


def canonical(blocks: dict) -> dict:
    """A block set as the tables keep it: a fused backward has no dq pass, so its dq blocks
    are written as its dkv blocks (the kernel reads neither)."""
    if blocks["fused_bwd"]:
        return {**blocks, "q_dq": blocks["q_dkv"], "kv_dq": blocks["kv_dkv"]}
    return dict(blocks)


def fastest(rows: list[dict]) -> dict[tuple[int, int], dict]:
    """(head_dim, seq_len) -> the sweep's fastest kernel row (forward + backward) there."""
    best: dict[tuple[int, int], dict] = {}
    for row in rows:
        if not isinstance(row["blocks"], dict) or "seconds" not in row:
            continue  # the XLA reference, or a block set the kernel refused
        key = (row["head_dim"], row["seq_len"])
        if key not in best or row["seconds"] < best[key]["seconds"]:
            best[key] = row
    return best


def tables(rows: list[dict]) -> tuple[dict, dict]:
    """The chip's rows of measured.json's ``splash_blocks`` (head_dim -> the fastest blocks up
    to a length, lengths with the same winner merged, the last for any longer) and
    ``splash_rates`` (head_dim -> [length, TFLOP/s of those blocks])."""
    best = fastest(rows)
    blocks: dict[str, list[dict]] = {}
    rates: dict[str, list[list[float]]] = {}
    for dim in sorted({d for d, _ in best}):
        lengths = sorted(t for d, t in best if d == dim)
        kept: list[dict] = []
        for t in lengths:
            chosen = canonical(best[dim, t]["blocks"])
            if kept and kept[-1]["blocks"] == chosen:
                kept[-1]["up_to"] = t
            else:
                kept.append({"up_to": t, "blocks": chosen})
        kept[-1]["up_to"] = None
        blocks[str(dim)] = kept
        rates[str(dim)] = [[t, round(best[dim, t]["tflops"], 1)] for t in lengths]
    return blocks, rates


def write_measured(result: dict, path: Path = MEASURED_FILE) -> None:
    """This chip's splash tables in theseus's measured.json (other chips and tables kept)."""
    data = json.loads(path.read_text())
    blocks, rates = tables(result["rows"])
    data["splash_blocks"]["chips"][result["device"]] = blocks
    data["splash_rates"]["chips"][result["device"]] = rates
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/tpu_attention_sweep.json"
    result = run(out)
    print("wrote", out)
    if result["device"].startswith("TPU"):  # not a CPU smoke run in the interpreter
        write_measured(result)
        print("wrote", MEASURED_FILE)
