"""Splash attention on a mesh: the failure it had, and its numerics per shard.

Before: the kernel was called on the whole batch, and XLA:TPU refuses to partition a Mosaic
kernel ("Mosaic kernels cannot be automatically partitioned. Please wrap the call in a
shard_map."): every multi-chip TPU run with ``model.attention=splash`` -- and with ``auto``,
which picks splash on TPUs -- failed at its first step. Now the kernel runs per shard
(``theseus.models.layers.kernel_sharding``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tests.chips.compiling import VOCAB, compile_train, require_aot, tiny
from tests.sharding.conftest import json_lines, run_module

MOSAIC_REFUSAL = "Mosaic kernels cannot be automatically partitioned"


def test_splash_unwrapped_is_refused_by_the_tpu_compiler():
    """What the old code did (the kernel on sharded arrays, no shard_map) still fails, so
    the wrapper below is what makes the difference."""
    require_aot()
    from theseus.core.chips.devices import compile_only_devices
    from theseus.models.layers.splash_attention import splash_attention

    devices = compile_only_devices("v5p-8")
    mesh = jax.make_mesh((4,), ("fsdp",), (jax.sharding.AxisType.Auto,), devices=devices)
    rows = NamedSharding(mesh, PartitionSpec("fsdp"))
    q = jax.ShapeDtypeStruct((4, 4, 128, 64), jnp.bfloat16, sharding=rows)
    kv = jax.ShapeDtypeStruct((4, 2, 128, 64), jnp.bfloat16, sharding=rows)
    seg = jax.ShapeDtypeStruct((4, 128), jnp.int32, sharding=rows)
    with pytest.raises(Exception, match=MOSAIC_REFUSAL):
        jax.jit(splash_attention).lower(q, kv, kv, seg, seg).compile()


def test_llama_splash_train_step_compiles_for_v5p_under_fsdp(monkeypatch):
    """The issue's reproduction, written against what the code had before the fix too: the
    setup's train step for llama with model.attention=splash, fsdp over the 4 chips of a
    v5p-8 (the setup given a Layout over the topology's devices, JAX's default backend
    reporting tpu). Before, compiling raised the Mosaic refusal above; now the step
    compiles with the kernel in it, forward and backward."""
    require_aot()
    from jax.experimental import topologies
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.sharding.placement import Layout
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    devices = topologies.get_topology_desc(topology_name="v5p:2x2x1", platform="tpu").devices
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    regs = registries()
    overrides = tiny("llama", "sharding.strategy=fsdp", "model.attention=splash")
    config = config_for(job_spec("llama/train/pretrain", regs), regs, overrides)
    job = config.to_object(TrainJobConfig)
    setup = TrainSetup.build(job, regs, VOCAB, layout=Layout(job.sharding, devices))
    assert setup.attention == "splash" and dict(setup.layout.mesh.shape)["fsdp"] == 4
    text = compile_train(setup).as_text()
    assert "splash_mha_fwd" in text and "splash_mha_dq" in text  # the kernel, both ways


@pytest.mark.slow
def test_splash_per_shard_equals_the_reference_under_every_strategy():
    """Outputs and gradients (input and every projection) of splash per shard, in the Pallas
    interpreter on 8 CPU devices, against the reference attention on one device: packed
    documents (segment ids differ per row) and GQA. Tolerance: 2 * eps * sqrt(n) * max|x|
    for sums of n terms, as for flash in tests/models/test_attention_impls.py."""
    done = run_module("tests.chips.splash_shards")
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["strategy"]: r for r in json_lines(done.stdout)}
    assert set(results) == {"dp", "fsdp", "tp", "fsdp+tp"}
    for name, result in results.items():
        assert result["per_shard"], f"{name}: splash did not run under shard_map"
        for kind in ("out", "grad"):
            error, tolerance = result[kind]["error"], result[kind]["tolerance"]
            assert error <= tolerance, f"{name} {kind}: {error:.2e} > {tolerance:.2e}"
