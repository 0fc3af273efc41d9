"""One process of a multi-process training run: ``python -m tests.sharding.multihost ROOT NAME
OVERRIDES...`` with THESEUS_COORDINATOR_ADDRESS / THESEUS_NUM_PROCESSES / THESEUS_PROCESS_ID
set. ``jax.distributed`` starts from those variables; process 0 creates the run directory,
then every process runs the job (the data must already be tokenized).
"""

from __future__ import annotations

import json
import logging
import sys


def main(root: str, name: str, overrides: list[str]) -> None:
    from theseus.core.sharding.distributed import initialize_from_env

    group = initialize_from_env()
    assert group is not None, "set THESEUS_NUM_PROCESSES > 1"
    import jax
    from jax.experimental import multihost_utils
    from theseus.core.jobs import JobContext
    from theseus.core.runner import prepare

    logging.basicConfig(level=logging.INFO)
    prepared = prepare("gpt/train/pretrain", overrides, root=root, name=name)
    if jax.process_index() == 0:
        prepared.run_dir.create(prepared.spec.key, prepared.tree.to_yaml(), prepared.parent)
    multihost_utils.sync_global_devices("run directory created")
    context = JobContext(root=prepared.root, run=prepared.run_dir, registries=prepared.registries)
    summary = prepared.spec.load()(prepared.typed_config(), context)()
    print(
        json.dumps(
            {
                "process": jax.process_index(),
                "devices": jax.device_count(),
                "local_devices": jax.local_device_count(),
                "summary": summary,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
