"""The theseus-models plugin: registers through the entry point group ``theseus``.

Cheap to import: config dataclasses only; the model code loads when a model is built.
"""

from __future__ import annotations

from theseus.core.components import Component, JobSpec
from theseus.core.hookspecs import hookimpl
from theseus.models.configs import FAMILIES, PRESETS


@hookimpl
def theseus_register_models(register):
    for name, (config, target, description) in FAMILIES.items():
        register(Component(name, config, target, description, extra={"presets": PRESETS[name]}))


@hookimpl
def theseus_register_jobs(register, registries):
    from theseus.core.components import Choice
    from theseus.models.generate_config import GenerateConfig

    for name in registries.models.names():
        if registries.models.get(name).target.startswith("theseus.models.") and (
            f"{name}/generate" not in registries.jobs
        ):
            register(
                JobSpec(
                    key=f"{name}/generate",
                    target="theseus.models.generate_job:GenerateJob",
                    description=f"generate text with a {name} model (HF directory or checkpoint)",
                    groups={
                        "model": Choice("models", name, locked=True),
                        "generate": GenerateConfig,
                    },
                )
            )
