"""``python -m theseus.dispatch.remote_main run ...``: ``theseus`` with multi-host set up.

When ``THESEUS_NUM_PROCESSES`` > 1 it calls ``jax.distributed.initialize`` with the
coordinator address, process count and id the bootstrap exported (gloo collectives on
CPU), then hands the arguments to the ``theseus`` CLI. With one process it imports no JAX.
"""

from __future__ import annotations

import os
import sys


def initialize_distributed() -> None:
    processes = int(os.environ.get("THESEUS_NUM_PROCESSES", "1"))
    if processes <= 1:
        return
    try:  # core's own (theseus.core.sharding), when this version of core has it
        from theseus.core.sharding.distributed import initialize_from_env
    except ImportError:
        pass
    else:
        initialize_from_env()
        return
    import jax

    if jax.distributed.is_initialized():
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["THESEUS_COORDINATOR_ADDRESS"],
        num_processes=processes,
        process_id=int(os.environ["THESEUS_PROCESS_ID"]),
        initialization_timeout=int(os.environ.get("THESEUS_DISTRIBUTED_TIMEOUT", "120")),
    )


def main() -> None:
    initialize_distributed()
    from theseus.cli.main import main as cli_main

    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
