"""The theseus-dispatch plugin: backends and the submit/status/logs/cancel commands.

Cheap to import: the backends (Fabric, kubernetes) load only when a target is used.
"""

from __future__ import annotations

from theseus.core.components import Component
from theseus.core.hookspecs import hookimpl
from theseus.dispatch import config

TARGETS = "theseus.dispatch.targets"


@hookimpl
def theseus_register_dispatch_targets(register):
    register(
        Component("ssh", config.SSHTargetConfig, f"{TARGETS}.ssh:SSHBackend", "SSH hosts (Fabric)")
    )
    register(
        Component(
            "slurm",
            config.SlurmTargetConfig,
            f"{TARGETS}.slurm:SlurmBackend",
            "SLURM (sbatch/srun)",
        )
    )
    register(
        Component(
            "volcano",
            config.VolcanoTargetConfig,
            f"{TARGETS}.volcano:VolcanoBackend",
            "Kubernetes Volcano Job",
        )
    )
    register(
        Component(
            "gcp-tpu", config.GcpTpuTargetConfig, f"{TARGETS}.gcp_tpu:TpuBackend", "GCP TPU VMs"
        )
    )


@hookimpl
def theseus_register_commands(register):
    from theseus.dispatch import cli

    register("submit", cli.submit)
    register("status", cli.status)
    register("logs", cli.logs)
    register("cancel", cli.cancel)
