"""The compiled decoding loop against the chip's memory roofline.

For a model shape, a number of rows and of new tokens, random weights (the numbers do not
change the bytes) and prompts that never stop: the whole loop (prefill, then every turn) is
timed after a first compiling run. A turn must read every weight in its compute dtype and
the KV cache written so far (every row's keys and values of slots 0..P+t); at the chip's
HBM bandwidth (819 GB/s on a v5e) that is the roofline of the loop:

    roofline_s = sum_t (weight_bytes + rows * (P + t + 1) * cache_bytes_per_position) / BW

``roofline_fraction = roofline_s / measured_s`` (the prefill's time counts against the loop,
its reads are not in the roofline: a fraction that errs low). Decode tokens/s is
``rows * new_tokens / measured_s``.

    python bench/decode_tpu.py OUT.json [CASE ...]     # CASE: shape:rows:new_tokens[:reader]
    python bench/decode_tpu.py x.json tiny:4:32         # a CPU smoke run
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from functools import partial
from pathlib import Path

HBM = {"TPU v5 lite": 819e9}
SHAPES = {
    "qwen3_06b": ("qwen3", {"preset": "0.6b", "vocab_size": 151936}),
    "gpt_12x768": ("gpt", {"preset": "124m", "vocab_size": 50304}),
    "llama_12x768": (
        "llama",
        {"n_layers": 12, "d_model": 768, "n_heads": 12, "n_kv_heads": 12, "d_ff": 3072},
    ),
    "tiny": ("llama", {"preset": "tiny", "vocab_size": 256}),
}
PROMPT = 32  # tokens of every prompt (the addition task's chat prompts are about 30)


def model_for(shape: str, max_seq_len: int, dtype: str):
    import jax
    from flax import nnx
    from theseus.models.families import family_named

    family, values = SHAPES[shape]
    spec = family_named(family)
    preset = values.get("preset", "")
    base = dict(spec.presets[preset]) if preset else {}
    fields = {**base, **values, "max_seq_len": max_seq_len, "dtype": dtype}
    fields.setdefault("vocab_size", 32000)
    config = spec.config(**fields)
    model_class = spec.load_model()

    @jax.jit
    def init():
        return nnx.split(model_class(config, rngs=nnx.Rngs(params=0)))[1]

    graphdef = nnx.graphdef(nnx.eval_shape(lambda: model_class(config, rngs=nnx.Rngs(0))))
    return graphdef, init()


def host_loop(model, prompts, new_tokens: int) -> float:
    """Seconds of the host loop that steps the model a token at a time (one jitted call and
    a host round trip per token: how generation ran before the compiled loop)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from theseus.models.sampling import Sampling

    from tests.models.stepwise_decoder import stepwise

    seeds = list(range(len(prompts)))
    kw = dict(max_new_tokens=new_tokens, how=Sampling(1.0), seeds=seeds)
    stepwise(model, prompts, **kw)  # compiles
    started = time.perf_counter()
    stepwise(model, prompts, **kw)
    return time.perf_counter() - started


def measure(shape: str, rows: int, new_tokens: int, reader: str) -> dict:
    import jax
    import numpy as np
    from flax import nnx
    from theseus.models.decoding import DecodePlan, decode_loop
    from theseus.models.generate import left_pad
    from theseus.models.sampler import compute_weight_bytes
    from theseus.models.sampling import Sampling

    platform = jax.devices()[0].platform
    dtype = "bfloat16" if platform == "tpu" else "float32"
    graphdef, state = model_for(shape, PROMPT + new_tokens, dtype)
    model = nnx.merge(graphdef, state)
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, model.config.vocab_size, (rows, PROMPT)).tolist()
    tokens, segments, positions = left_pad(prompts)
    plan = DecodePlan(
        max_new_tokens=new_tokens,
        sampling=Sampling(1.0),
        stops=(),
        cache_slots=PROMPT + new_tokens,
        reader=reader,
        per_row_keys=True,
    )
    keys = jax.vmap(jax.random.key)(jax.numpy.arange(rows, dtype=jax.numpy.uint32))
    compile_s, turns, label = 0.0, new_tokens, reader
    if reader == "host":
        measured = host_loop(model, prompts, new_tokens)
        reader = "reference"
    else:
        run = jax.jit(partial(decode_loop, graphdef, plan))
        started = time.perf_counter()
        compiled = run.lower((state,), tokens, positions, segments, keys).compile()
        compile_s = time.perf_counter() - started
        times = []
        for _ in range(int(os.environ.get("DECODE_REPEATS", "2"))):
            started = time.perf_counter()
            out = compiled((state,), tokens, positions, segments, keys)
            out.tokens.block_until_ready()
            times.append(time.perf_counter() - started)
        measured, turns = min(times), int(out.turns)
    cache = jax.eval_shape(lambda: model.init_cache(rows, PROMPT + new_tokens, reader))
    per_position = sum(math.prod(x.shape[3:]) * x.dtype.itemsize for x in (cache.k, cache.v))
    per_position *= cache.k.shape[0]  # layers
    weights = compute_weight_bytes(model)
    bandwidth = HBM.get(jax.devices()[0].device_kind, 0.0)
    roofline_bytes = sum(
        weights + rows * (PROMPT + t + 1) * per_position for t in range(new_tokens)
    )
    result = {
        "shape": shape,
        "rows": rows,
        "new_tokens": new_tokens,
        "prompt": PROMPT,
        "reader": label,
        "turns": turns,
        "compile_s": compile_s,
        "decode_s": measured,
        "decode_tokens_per_s": rows * new_tokens / measured,
        "ms_per_turn": 1e3 * measured / new_tokens,
        "weight_bytes": weights,
        "cache_bytes_per_position": per_position,
        "bytes_per_turn_mean": roofline_bytes / new_tokens,
        "cache_bytes": rows * cache.k.shape[2] * per_position,
    }
    if bandwidth:
        result["roofline_s"] = roofline_bytes / bandwidth
        result["roofline_fraction"] = roofline_bytes / bandwidth / measured
    stats = jax.devices()[0].memory_stats() or {}
    result["peak_bytes"] = stats.get("peak_bytes_in_use")
    return result


def main() -> None:
    import jax

    out = Path(sys.argv[1])
    cases = sys.argv[2:] or ["qwen3_06b:64:1024", "qwen3_06b:64:1024:reference"]
    default_reader = "pallas" if jax.devices()[0].platform == "tpu" else "reference"
    report = {"device": jax.devices()[0].device_kind, "cases": []}
    for case in cases:
        shape, rows, new, *rest = case.split(":")
        reader = rest[0] if rest else default_reader
        try:
            result = measure(shape, int(rows), int(new), reader)
        except Exception as error:  # a case that fails is reported, the others still run
            result = {"case": case, "error": f"{type(error).__name__}: {str(error)[:600]}"}
        print(case, json.dumps(result), flush=True)
        report["cases"].append(result)
        out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
