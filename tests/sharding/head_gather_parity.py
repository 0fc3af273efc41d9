"""The chunked loss with its head gathered once (``train/head_gather.py``) against the same loss
left to the compiler, on 8 simulated devices under fsdp: a tiny Llama's loss and gradients.
Run by tests/sharding/test_head_gather_parity.py (``python -m``, 8 CPU devices); prints one
JSON line."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

SEQ, ROWS, VOCAB, CHUNKS = 32, 8, 384, 4


def main() -> None:
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
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
        "sharding.strategy=fsdp",
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
        with jax.set_mesh(setup.layout.mesh):
            fn = jax.jit(jax.value_and_grad(loss))
            value, grads = fn(params)
            text = fn.lower(params).compile().as_text()
        return float(value), jax.tree.map(np.asarray, grads), text

    from theseus.core.plan.hlo_stats import analyze

    gathered, grads, text = run()
    step.gather_head = lambda model: None  # the compiler's own layout
    plain, reference, text_plain = run()
    diff = jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), grads, reference)
    scale = jax.tree.map(lambda b: float(np.max(np.abs(b))), reference)
    pairs = zip(jax.tree.leaves(diff), jax.tree.leaves(scale), strict=True)
    worst = max(d / max(s, 1e-30) for d, s in pairs)
    print(
        json.dumps(
            {
                "devices": jax.device_count(),
                "mesh": dict(setup.layout.sizes),
                "loss": gathered,
                "loss_reference": plain,
                "grad_relative": worst,
                "finite": bool(np.isfinite(gathered)),
                "collectives": analyze(text).collective_bytes,
                "collectives_reference": analyze(text_plain).collective_bytes,
                "float32": bool(jnp.dtype(setup.execution.compute_dtype) == jnp.float32),
            }
        )
    )


if __name__ == "__main__":
    main()
