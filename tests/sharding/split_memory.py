"""Per-device memory of the dry run's report as the new axes grow, in a process with 8 devices.

``python -m tests.sharding.split_memory`` prints one JSON object per line:

* ``{"context": N, ...}`` for N = 1, 2, 4, 8: the dry run's report (``memory.report``:
  the step compiled against abstract arrays) of a 2-layer GPT at T = 65536 with its sequence
  over N devices (``sharding.context=N``, ring, zigzag), one sequence per step;
* ``{"expert": P, ...}`` for P = 1, 2, 4: the bytes one device holds of the qwen3_moe tiny
  preset's expert weights (4 experts) with ``sharding.expert=P`` (no compile needed).
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json  # noqa: E402

import jax  # noqa: E402

SEQ = 65536
GPT = [
    "model.n_layers=2",
    "model.d_model=64",
    "model.n_heads=2",
    f"model.max_seq_len={SEQ}",
    f"training.seq_len={SEQ}",
    "training.global_batch_size=1",
]


def setup_for(key: str, overrides: list[str], devices: int):
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec
    from theseus.core.sharding.placement import Layout
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    regs = registries()
    tree = config_for(job_spec(key, regs), regs, [*overrides, "model.vocab_size=384"])
    config = tree.to_object(TrainJobConfig)
    return TrainSetup.build(
        config, regs, 384, layout=Layout(config.sharding, jax.devices()[:devices])
    )


def main(parts: list[str]) -> None:
    from theseus.core.plan.plan_report import report
    from theseus.core.sharding.parallel import expert_parameter_bytes

    if "expert" in parts:
        for ways in (1, 2, 4):
            overrides = ["model.preset=tiny", "training.seq_len=32", f"sharding.expert={ways}"]
            setup = setup_for("qwen3_moe/train/pretrain", overrides, ways)
            state = setup.abstract_state
            line = {
                "expert": ways,
                "expert_params_bytes": expert_parameter_bytes(state.params),
                "mesh": dict(setup.layout.sizes),
            }
            print(json.dumps(line), flush=True)
    if "context" in parts:
        for ways in (1, 2, 4, 8):
            setup = setup_for("gpt/train/pretrain", [*GPT, f"sharding.context={ways}"], ways)
            result = report(setup, "model.vocab_size")
            keep = ("activation_bytes", "total_bytes", "batch_bytes", "attention", "mesh")
            line = {"context": ways, **{k: result[k] for k in keep}}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["expert", "context"])
