"""Configs of the ``hf/import``, ``hf/export`` and ``lora/merge`` jobs (cheap to import: no
JAX)."""

from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.data.config import DEFAULT_DATASET


@dataclass
class ImportConfig:
    dir: str = option(
        help="Hugging Face folder to import: config.json, *.safetensors, tokenizer.json "
        "(a hub id downloads one, with theseus-models[hub])"
    )
    tokenizer: str = option(
        "", "a tokenizer.json (or the folder holding it) to use instead of the folder's"
    )
    dataset: str = option(
        DEFAULT_DATASET,
        "the dataset the imported run's config names: a run training it further tokenizes it "
        "with the imported tokenizer",
    )


@dataclass
class ExportConfig:
    run: str = option(help="the run to export: RUN (its newest checkpoint) or RUN@STEP")
    dir: str = option("", "the folder to write; '' = <this job's run folder>/hf")
    tokenizer: bool = option(True, "also write the run's tokenizer (tokenizer.json and config)")
    overwrite: bool = option(
        False,
        "export into a folder that holds files: replace its model files (old shards, index "
        "and tokenizer included; other files stay)",
    )
    merge: bool = option(
        False, "a LoRA run: write one model, its adapters folded into the base weights"
    )
    peft: bool = option(
        False,
        "a LoRA run: write its adapters as a PEFT folder (adapter_config.json, "
        "adapter_model.safetensors) for transformers + peft on the base model",
    )


@dataclass
class MergeConfig:
    run: str = option(
        help="the LoRA run whose adapters to fold into its base: RUN (its newest checkpoint) "
        "or RUN@STEP"
    )
