"""The rollout sampler's decoding loop keeps one KV cache and writes it in place, on a TPU.

Compiled by XLA:TPU for one v5e chip (compile-only devices, the aot group): a 2-layer model
with 128 rows of 2,048 cached positions, so the cache (268 MB of keys and values in
bfloat16; each position's two heads of 64 side by side, 128 lanes, no padding) dwarfs
everything else the loop holds, and neither half fits the chip's 128 MiB of VMEM (where
XLA:TPU would otherwise place one, out of the count of temporaries). A loop that copied the cache at a turn,
or stacked each layer's slice into a new buffer (what a scan over per-layer caches does),
would hold two caches: at least 537 MB of temporaries. The prefill's splash kernel pads its
16-token prompts to 128-position blocks (about 42 MB here); the test allows half a cache
more than the cache.
"""

from __future__ import annotations

import pytest

from tests.chips.compiling import compile_decode, require_aot, target_setup, tiny


@pytest.fixture(autouse=True)
def _aot() -> None:
    require_aot()


def test_the_decoding_loop_holds_one_cache_and_reads_it_with_the_kernel():
    shape = ["model.d_model=256", "model.n_heads=4", "model.n_kv_heads=2", "model.n_layers=2"]
    overrides = tiny("llama", *shape, seq_len=2048, batch=128)
    setup = target_setup("llama", "v5e-1", overrides)
    compiled = compile_decode(setup, prompt_width=16, new_tokens=2032)
    layers, rows, kv_heads, slots, head_dim = 2, 128, 2, 2048, 64
    cache = 2 * layers * rows * kv_heads * slots * head_dim * 2  # keys and values, bf16
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert cache <= temp < 1.5 * cache, (temp, cache)
    text = compiled.as_text()
    assert "decode_attention" in text and "splash_mha_fwd" in text
