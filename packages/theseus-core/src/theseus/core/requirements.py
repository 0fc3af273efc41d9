"""Which pip package provides what, so a missing one is named in a one-line error.

Two tables. ``PLUGIN_PACKAGES``: names (jobs, datasets, models, ...) that one of our plugin
packages registers; an unknown name listed here means that package is missing, and the error
says how to install it. ``MODULE_PACKAGES``: optional third-party modules and the pip line (an
extra of ours) that brings each in; :func:`require` imports one or raises with that line.

Keep both in step with the plugins and the extras in the packages' ``pyproject.toml``
(``tests/core/test_packaging.py`` checks them against what is registered and declared).
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
from collections.abc import Collection
from fnmatch import fnmatchcase
from types import ModuleType

from theseus.core.errors import TheseusError

_MODEL_FAMILIES = [
    "gpt",
    "llama",
    "mistral",
    "mixtral",
    "gemma3",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
]
_DATASETS = [
    "python-stdlib",
    "fineweb",
    "fineweb-edu",
    "text-files",
    "alpaca",
    "addition",
    "preference-jsonl",
    "addition-preference",
]

#: Registry kind (``Registry.kind``) -> [(name pattern, the package that registers it)].
PLUGIN_PACKAGES: dict[str, list[tuple[str, str]]] = {
    "job": [
        ("data/tokenize/*", "theseus-data"),
        ("hf/*", "theseus-models"),
        ("lora/*", "theseus-models"),
        # core registers <model>/train/... and /evaluate, but only for models that exist
        *[(f"{family}/*", "theseus-models") for family in _MODEL_FAMILIES],
    ],
    "model": [(family, "theseus-models") for family in _MODEL_FAMILIES],
    "dataset": [(name, "theseus-data") for name in _DATASETS],
    "tokenizer": [(name, "theseus-data") for name in ["bpe", "byte", "hf", "tiktoken"]],
    "dispatch target": [(n, "theseus-dispatch") for n in ["ssh", "slurm", "volcano", "gcp-tpu"]],
}

#: Importable module -> what to pip install for it.
MODULE_PACKAGES: dict[str, str] = {
    "matplotlib": "theseus-core[plot]",
    "wandb": "theseus-core[wandb]",
    "tensorboardX": "theseus-core[tensorboard]",
    "lm_eval": "theseus-core[lm-eval]",
    "starlette": "theseus-core[serve]",
    "uvicorn": "theseus-core[serve]",
    "plotly": "theseus-core[serve]",
    "datasets": "theseus-data[hub]",
    "huggingface_hub": "theseus-models[hub]",
    "kubernetes": "theseus-dispatch[volcano]",
    "tokenizers": "tokenizers",
}


class MissingPackageError(TheseusError):
    """A job, dataset or feature needs a package that is not installed."""


def pip_install(package: str) -> str:
    """The command that installs ``package`` (quoted when it names extras, for the shell)."""
    return f"pip install '{package}'" if "[" in package else f"pip install {package}"


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def provider(kind: str, name: str) -> str | None:
    """The package whose plugin registers ``name`` in registry ``kind``, if it is one of ours."""
    for pattern, package in PLUGIN_PACKAGES.get(kind, []):
        if fnmatchcase(name, pattern):
            return package
    return None


def plugin_hint(kind: str, name: str, loaded: Collection[str]) -> str | None:
    """Why ``name`` is unknown when the package that provides it is not among ``loaded``.

    ``loaded``: the distributions whose plugins are loaded. ``None`` when the provider is
    loaded (then the name is simply wrong) or not known.
    """
    package = provider(kind, name)
    if package is None or package in loaded:
        return None
    if installed(package):
        return (
            f"it needs the {package} package, which is installed but its plugin is not "
            "loaded (see `theseus plugins`, THESEUS_PLUGINS, THESEUS_DISABLE_PLUGIN_AUTOLOAD)"
        )
    return f"it needs the {package} package, which is not installed: {pip_install(package)}"


def missing_module_message(module: str, feature: str, package: str | None = None) -> str:
    """``"<feature> needs the <module> package: pip install '<package>'"``."""
    package = package or MODULE_PACKAGES.get(module, module)
    return f"{feature} needs the {module} package: {pip_install(package)}"


def require(
    module: str,
    feature: str,
    *,
    package: str | None = None,
    error: type[TheseusError] = MissingPackageError,
) -> ModuleType:
    """Import ``module``, or raise ``error`` naming the pip command that installs it.

    ``feature`` starts the message (``"plotting"``, ``"logging.loggers=wandb"``); ``package``
    overrides the pip target from :data:`MODULE_PACKAGES`.
    """
    try:
        return importlib.import_module(module)
    except ImportError as cause:
        message = missing_module_message(module, feature, package)
        top = module.split(".")[0]
        if cause.name and cause.name.split(".")[0] != top:  # installed, but broken
            message += f" (importing it failed: {type(cause).__name__}: {cause})"
        raise error(message) from cause
