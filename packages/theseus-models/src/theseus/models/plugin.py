"""The theseus-models plugin (entry point group ``theseus``): families, jobs and services.

The families it registers are ``theseus.models.families.FAMILIES``. Cheap to import: configs
and presets only; the model, Hugging Face and generation code is imported inside the hook
bodies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from theseus.core.components import JobSpec, per_model_job
from theseus.core.hookspecs import hookimpl
from theseus.models.families import FAMILIES
from theseus.models.generate_config import GenerateConfig
from theseus.models.hf_jobs_config import ExportConfig, ImportConfig, MergeConfig

if TYPE_CHECKING:
    from theseus.core.registry import Registries

# ---------------------------------------------------------------------------- registration


@hookimpl
def theseus_register_models(register: Any) -> None:
    for family in FAMILIES:
        register(family.component())


@hookimpl
def theseus_register_jobs(register: Any, registries: Registries) -> None:
    # every registered model generates, third-party ones included (all models are
    # registered before any job): with a KV cache when it has one, else by full forwards
    for name in registries.models.names():
        if f"{name}/generate" not in registries.jobs:
            described = f"generate text with a {name} model (a training run or an HF folder)"
            target = "theseus.models.generate_job:GenerateJob"
            register(
                per_model_job(name, "generate", target, described, ("generate", GenerateConfig))
            )
    # one-shot tools over a folder or a run's checkpoint: nothing to resume
    tools: list[tuple[str, str, str, dict[str, Any]]] = [
        ("hf/import", "theseus.models.hf_jobs:ImportJob",
         "import a Hugging Face folder as a <family>/train/pretrain run at step 0 (weights, "
         "model config, tokenizer)", {"hf": ImportConfig}),
        ("hf/export", "theseus.models.hf_jobs:ExportJob",
         "export a run's checkpoint as a Hugging Face folder (config.json, safetensors, "
         "tokenizer); a LoRA run merged (hf.merge) or as PEFT adapters (hf.peft)",
         {"hf": ExportConfig}),
        ("lora/merge", "theseus.models.lora_jobs:MergeJob",
         "fold a LoRA run's adapters into its base: a plain run of the same job at step 0",
         {"merge": MergeConfig}),
    ]  # fmt: skip
    for key, target, description, groups in tools:
        register(JobSpec(key, target, description, groups, resumes=False))


# ---------------------------------------------------------------------------- services


@hookimpl
def theseus_load_hf_model(directory: str, dtype: str) -> Any:
    """The checkpoint as a model of its family; ``None`` for an architecture of no family."""
    from theseus.models.hf import family_for, load_hf, read_config, resolve

    path = resolve(directory)
    if family_for(read_config(path)) is None:
        return None
    return load_hf(path, dtype=dtype or None)


@hookimpl
def theseus_save_hf_model(model: Any, directory: str) -> Any:
    """The directory written; ``None`` for a model of no family here."""
    from theseus.models.hf import family_of, save_hf

    if family_of(model) is None:
        return None
    return save_hf(model, directory)


@hookimpl
def theseus_adapt_model(model_class: type, lora: Any) -> Any:
    from theseus.models.layers.lora import adapted_class

    return adapted_class(model_class, lora)


@hookimpl
def theseus_sampler(setup: Any, request: Any) -> Any:
    """The compiled rollout sampler of a setup whose model has a KV cache; ``None`` else."""
    model_class = setup.model_class
    if not (hasattr(model_class, "init_cache") and hasattr(model_class, "decode")):
        return None
    from theseus.models.sampler import RolloutSampler

    return RolloutSampler(setup, request)


@hookimpl
def theseus_generate(
    model: Any, prompts: list[list[int]], max_new_tokens: int, stop_tokens: list[int], pad_id: int
) -> Any:
    """Greedy continuations by KV-cache decoding; ``None`` for a model without a cache."""
    if not (hasattr(model, "init_cache") and hasattr(model, "decode")):
        return None
    from theseus.models.generate import generate

    return generate(
        model, prompts, max_new_tokens=max_new_tokens, stop_tokens=stop_tokens, pad_id=pad_id
    )
