"""The chunked loss three ways, traced as a step is (its layout's mesh and rules): on each
device's rows (``train/sharded_loss.py``, the default), with its head gathered once by a
sharding constraint (``train/head_gather.py``) and left to the compiler, on 8 simulated
devices: a tiny Llama's loss, gradients and collectives. Run by
tests/sharding/test_head_gather_parity.py (``python -m``, 8 CPU devices; the arguments are
config overrides, ``sharding.strategy=fsdp`` by default); prints one JSON line."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

SEQ, ROWS, VOCAB, CHUNKS = 32, 8, 384, 4


def main() -> None:
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.sharding.traced_rules import tracing_with
    from theseus.core.train import step
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.job_layout import job_layout
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    overrides = [
        "model.preset=tiny",
        f"model.max_seq_len={SEQ}",
        f"training.seq_len={SEQ}",
        f"training.global_batch_size={ROWS}",
        f"model.vocab_size={VOCAB}",
        *(sys.argv[1:] or ["sharding.strategy=fsdp"]),
    ]
    config = config_for(job_spec("llama/train/pretrain", regs), regs, overrides).to_object(
        TrainJobConfig
    )
    setup = TrainSetup.build(config, regs, VOCAB, layout=job_layout(config))
    params = setup.init_state().params
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (ROWS, SEQ + 1), dtype=np.int32)
    batch = {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": np.tile(np.arange(SEQ, dtype=np.int32), (ROWS, 1)),
        "segment_ids": np.ones((ROWS, SEQ), np.int32),
        "loss_mask": np.ones((ROWS, SEQ), np.float32),
    }
    batch = jax.device_put(batch, setup.layout.batch_sharding)

    forward = step.Forward(setup.graphdef, setup.rest)

    def loss(p):
        total, _ = step.summed_loss(forward, p, batch, chunks=CHUNKS)
        return total

    def run():
        with jax.set_mesh(setup.layout.mesh), tracing_with(setup.layout.rules.params):
            fn = jax.jit(jax.value_and_grad(loss))
            value, grads = fn(params)
            text = fn.lower(params).compile().as_text()
        return float(value), jax.tree.map(np.asarray, grads), text

    from theseus.core.plan.hlo_stats import analyze

    def worst(grads, reference):
        diff = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), grads, reference)
        scale = jax.tree.map(lambda b: float(np.max(np.abs(b))), reference)
        pairs = zip(jax.tree.leaves(diff), jax.tree.leaves(scale), strict=True)
        return max(d / max(s, 1e-30) for d, s in pairs)

    per_shard, grads_per_shard, text_per_shard = run()
    step.per_shard_cross_entropy = lambda *args: None  # the head gathered by a constraint
    gathered, grads, text = run()
    step.gather_head = lambda model: None  # the compiler's own layout
    plain, reference, text_plain = run()
    print(
        json.dumps(
            {
                "devices": jax.device_count(),
                "mesh": dict(setup.layout.sizes),
                "loss_per_shard": per_shard,
                "loss": gathered,
                "loss_reference": plain,
                "grad_relative_per_shard": worst(grads_per_shard, reference),
                "grad_relative": worst(grads, reference),
                "finite": bool(np.isfinite(gathered) and np.isfinite(per_shard)),
                "table_bytes": VOCAB * setup.config.model.d_model * 4,
                "collectives_per_shard": analyze(text_per_shard).collective_bytes,
                "collectives": analyze(text).collective_bytes,
                "collectives_reference": analyze(text_plain).collective_bytes,
                "float32": bool(jnp.dtype(setup.execution.compute_dtype) == jnp.float32),
            }
        )
    )


if __name__ == "__main__":
    main()
