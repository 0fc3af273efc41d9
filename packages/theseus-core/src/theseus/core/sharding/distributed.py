"""``jax.distributed`` from the environment: theseus' own variables, SLURM or Volcano.

=====================  ================================  ==========================
                       theseus                           SLURM / Volcano
=====================  ================================  ==========================
process count          THESEUS_NUM_PROCESSES             SLURM_NTASKS / VC_<TASK>_NUM
process id             THESEUS_PROCESS_ID                SLURM_PROCID / VC_TASK_INDEX
coordinator host:port  THESEUS_COORDINATOR_ADDRESS       first host of SLURM_JOB_NODELIST
                                                         / VC_<TASK>_HOSTS, port
                                                         THESEUS_COORDINATOR_PORT (8476)
=====================  ================================  ==========================

CPU collectives go through gloo. With one process nothing is initialised.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from theseus.core.errors import TheseusError

log = logging.getLogger(__name__)
DEFAULT_PORT = 8476


class DistributedError(TheseusError):
    """The multi-process environment is incomplete or inconsistent."""


@dataclass(frozen=True)
class ProcessGroup:
    coordinator: str
    num_processes: int
    process_id: int
    source: str


def expand_nodelist(nodelist: str) -> list[str]:
    """``n[1-3,7],gpu01`` -> ``[n1, n2, n3, n7, gpu01]`` (SLURM's compressed host lists)."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            width = len(first)
            for number in range(int(first), int(last or first) + 1):
                hosts.append(f"{prefix}{number:0{width}d}")
    return hosts


def _volcano(env: Mapping[str, str]) -> tuple[int | None, str | None]:
    for key, value in env.items():
        match = re.fullmatch(r"VC_(\w+)_HOSTS", key)
        if match and value:
            count = env.get(f"VC_{match.group(1)}_NUM")
            return (int(count) if count else len(value.split(","))), value.split(",")[0]
    return None, None


def process_group(env: Mapping[str, str] | None = None) -> ProcessGroup | None:
    """The process group the environment describes, or None for a single process."""
    env = os.environ if env is None else env
    port = int(env.get("THESEUS_COORDINATOR_PORT", DEFAULT_PORT))
    vc_count, vc_host = _volcano(env)
    if "THESEUS_NUM_PROCESSES" in env:
        source, count, pid = "THESEUS", env["THESEUS_NUM_PROCESSES"], env.get("THESEUS_PROCESS_ID")
        host = None
    elif "SLURM_NTASKS" in env and "SLURM_PROCID" in env:
        source, count, pid = "SLURM", env["SLURM_NTASKS"], env["SLURM_PROCID"]
        nodes = expand_nodelist(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")))
        host = nodes[0] if nodes else None
    elif vc_count is not None:
        source, count, host = "Volcano", str(vc_count), vc_host
        pid = env.get("VC_TASK_INDEX", env.get("VK_TASK_INDEX"))
    else:
        return None
    try:
        num = int(count)
        process_id = int(pid) if pid is not None else -1
    except ValueError as error:
        raise DistributedError(f"{source} process count/id are not integers: {error}") from error
    if num <= 1:
        return None
    if not 0 <= process_id < num:
        raise DistributedError(
            f"{source} process id {pid} is not in [0, {num}) (set THESEUS_PROCESS_ID)"
        )
    coordinator = env.get("THESEUS_COORDINATOR_ADDRESS") or (f"{host}:{port}" if host else "")
    if not coordinator:
        raise DistributedError(
            f"{num} processes but no coordinator: set THESEUS_COORDINATOR_ADDRESS=host:port"
        )
    return ProcessGroup(coordinator, num, process_id, source)


def initialize_from_env(env: Mapping[str, str] | None = None) -> ProcessGroup | None:
    """Call ``jax.distributed.initialize`` once when the environment names several processes."""
    group = process_group(env)
    if group is None:
        return None
    import jax

    if jax.distributed.is_initialized():
        return group
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = int((os.environ if env is None else env).get("THESEUS_DISTRIBUTED_TIMEOUT", "300"))
    try:
        jax.distributed.initialize(
            coordinator_address=group.coordinator,
            num_processes=group.num_processes,
            process_id=group.process_id,
            initialization_timeout=timeout,
        )
    except RuntimeError as error:
        raise DistributedError(f"jax.distributed.initialize failed ({group}): {error}") from error
    log.info(
        "process %d of %d (coordinator %s, from %s)",
        group.process_id,
        group.num_processes,
        group.coordinator,
        group.source,
    )
    return group
