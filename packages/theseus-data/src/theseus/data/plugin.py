"""The theseus-data plugin: datasets, tokenizers and one ``data/tokenize/<name>`` job per
registered dataset (third-party ones included); it prepares the datasets a trainer names
and loads tokenizers for core. Cheap to import: configs only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from theseus.core.components import Choice, Component, JobSpec
from theseus.core.hookspecs import hookimpl
from theseus.data.datasets.chat import AdditionConfig, AlpacaConfig
from theseus.data.datasets.fineweb import FinewebConfig
from theseus.data.datasets.preference import AdditionPreferenceConfig, PreferenceJsonlConfig
from theseus.data.datasets.stdlib import StdlibConfig
from theseus.data.datasets.text_files import TextFilesConfig
from theseus.data.tokenize.options import job_schema
from theseus.data.tokenizers import find_tokenizer
from theseus.data.tokenizers.byte import ByteConfig
from theseus.data.tokenizers.huggingface import BPEConfig, HFConfig
from theseus.data.tokenizers.tiktoken_tokenizer import TiktokenConfig

DS = "theseus.data.datasets"
TOK = "theseus.data.tokenizers"

if TYPE_CHECKING:
    from theseus.core.data.config import DataConfig
    from theseus.core.jobs import Prerequisite
    from theseus.core.registry import Registries
    from theseus.data.tokenizers.base import Tokenizer


@hookimpl
def theseus_register_datasets(register: Callable[..., None]) -> None:
    register(
        Component(
            "python-stdlib",
            StdlibConfig,
            f"{DS}.stdlib:PythonStdlib",
            "the installed Python standard library's source (~11 MB, no download)",
        )
    )
    register(Component("fineweb", FinewebConfig, f"{DS}.fineweb:Fineweb", "HuggingFaceFW/fineweb"))
    register(
        Component(
            "fineweb-edu", FinewebConfig, f"{DS}.fineweb:FinewebEdu", "HuggingFaceFW/fineweb-edu"
        )
    )
    register(
        Component(
            "text-files",
            TextFilesConfig,
            f"{DS}.text_files:TextFiles",
            "local .txt/.jsonl/.parquet files by glob",
        )
    )
    register(
        Component(
            "alpaca", AlpacaConfig, f"{DS}.chat:Alpaca", "alpaca-style instruction jsonl (chat)"
        )
    )
    register(
        Component(
            "addition", AdditionConfig, f"{DS}.chat:Addition", "synthetic a+b problems (chat)"
        )
    )
    register(
        Component(
            "preference-jsonl",
            PreferenceJsonlConfig,
            f"{DS}.preference:PreferenceJsonl",
            "local jsonl preference pairs: prompt, chosen, rejected (strings or chats)",
        )
    )
    register(
        Component(
            "addition-preference",
            AdditionPreferenceConfig,
            f"{DS}.preference:AdditionPreference",
            "synthetic a+b problems: the right sum chosen, a wrong one rejected (pairs)",
        )
    )


@hookimpl
def theseus_register_tokenizers(register: Callable[..., None]) -> None:
    register(
        Component(
            "bpe",
            BPEConfig,
            f"{TOK}.huggingface:BPETokenizer",
            "byte-level BPE trained on the dataset",
            extra={"trained": True},
        )
    )
    register(Component("hf", HFConfig, f"{TOK}.huggingface:HFTokenizer", "a tokenizer.json"))
    register(
        Component(
            "tiktoken",
            TiktokenConfig,
            f"{TOK}.tiktoken_tokenizer:TiktokenTokenizer",
            "OpenAI tiktoken encodings (cl100k_base offline)",
        )
    )
    register(Component("byte", ByteConfig, f"{TOK}.byte:ByteTokenizer", "256 bytes + specials"))


@hookimpl
def theseus_register_jobs(register: Callable[..., None], registries: Registries) -> None:
    for name, component in registries.datasets.items():
        register(
            JobSpec(
                key=f"data/tokenize/{name}",
                target="theseus.data.tokenize.job:TokenizeJob",
                description=f"tokenize {name} into <root>/data/{name}/ (parallel, resumable)",
                groups={
                    "data": job_schema(name, component.config),
                    "tokenizer": Choice("tokenizers", default="bpe"),
                },
            )
        )


@hookimpl
def theseus_prepare_dataset(
    data: DataConfig, name: str, primary: str, root: str
) -> Prerequisite | None:
    from theseus.data.prepare import prepare_dataset

    return prepare_dataset(data, name, primary, root)


@hookimpl
def theseus_load_tokenizer(path: str) -> Tokenizer | None:
    return find_tokenizer(path)
