"""A run started from other weights takes the model config and tokenizer those weights need.

``init.hf=DIR``: ``model.*`` from ``DIR/config.json`` (:mod:`theseus.core.hf_model_config`)
and the folder's tokenizer (``data.tokenizer=hf``, ``data.tokenizer_options.path=DIR``).
``init.checkpoint=RUN[@STEP]``: ``model.*`` from RUN's saved config and RUN's tokenizer: the
very file it trained with when RUN trained one (``bpe``), else its tokenizer settings.

Values nobody gave are filled in; a value given (on the command line, or differing from its
default in a config file) that contradicts the source is refused before any work, except the
model fields that do not change what the weights mean (:data:`FREE_MODEL_FIELDS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from theseus.core.data.identity import DataRecord
from theseus.core.errors import ConfigError, JobError, TheseusError
from theseus.core.hf_model_config import fill_model_from_hf
from theseus.core.jobs import parse_reference
from theseus.core.rundir import RunDir

# model.* a run may set freely when it starts from a checkpoint: how it computes, not what
# the weights are (a wrong max_seq_len for learned positions fails when the weights load).
FREE_MODEL_FIELDS = frozenset(
    {
        "preset",
        "dtype",
        "attention",
        "max_seq_len",
        "init_std",
        "capacity_factor",
        "bias_update_rate",
        "router_aux_loss_coef",
        "moe_grouping",
        "sliding_window",
        "rope_scaling",
        "rope_factor",
        "rope_original_max_len",
        "rope_low_freq_factor",
        "rope_high_freq_factor",
        "rope_beta_fast",
        "rope_beta_slow",
        "rope_mscale",
        "rope_mscale_all_dim",
    }
)
TOKENIZER_KEYS = ("tokenizer", "vocab_size", "tokenizer_options")
TRAINED_TOKENIZERS = ("bpe",)  # trained on their corpus: reused by their file


def fill_from_init_sources(tree: Any, explicit: Iterable[str], root: str | None) -> None:
    """Fill ``model.*`` and the tokenizer of a resolved tree from ``init.hf`` or
    ``init.checkpoint``; ``explicit``: the keys given on the command line."""
    groups = tree.spec.groups
    if "init" not in groups:
        return
    explicit = set(explicit)
    fill_model_from_hf(tree, explicit)
    if "data" in groups and tree.get("init.hf"):
        _take_hf_tokenizer(tree, explicit, str(tree.get("init.hf")))
    if tree.get("init.checkpoint") and root is not None:
        _take_from_run(tree, explicit, root, str(tree.get("init.checkpoint")))


def _given(tree: Any, explicit: set[str], group: str) -> set[str]:
    """Keys of ``group`` someone chose: on the command line, or unlike the schema default."""
    chosen = {key for key in explicit if key.startswith(f"{group}.")}
    for field in dataclasses.fields(tree.schemas[group]):
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            continue
        if _plain(tree.get(f"{group}.{field.name}")) != default:
            chosen.add(f"{group}.{field.name}")
    return chosen


def _plain(value: Any) -> Any:
    """An OmegaConf container as plain dicts and lists (for comparisons)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _take_hf_tokenizer(tree: Any, explicit: set[str], directory: str) -> None:
    if not (Path(directory) / "tokenizer.json").is_file():
        return  # a folder of weights alone: the tokenizer is the user's to name
    given = _given(tree, explicit, "data")
    kind = tree.get("data.tokenizer")
    if "data.tokenizer" in given and kind != "hf":
        raise ConfigError(
            f"init.hf={directory} brings its tokenizer ({directory}/tokenizer.json); "
            f"data.tokenizer={kind} contradicts it: drop data.tokenizer"
        )
    if "data.tokenizer_options" in given:
        named = _plain(tree.get("data.tokenizer_options")).get("path")
        if _json_bytes(named) != _json_bytes(directory):
            raise ConfigError(
                f"init.hf={directory} brings its tokenizer ({directory}/tokenizer.json); "
                f"data.tokenizer_options.path={named} is another: drop data.tokenizer_options"
            )
        return  # the same tokenizer.json, with the user's other options
    tree.set("data.tokenizer", "hf")
    tree.set("data.tokenizer_options", {"path": directory})


def _take_from_run(tree: Any, explicit: set[str], root: str, reference: str) -> None:
    name, _ = parse_reference(reference, "init.checkpoint")
    run = RunDir(root, name)
    if not run.config_path.is_file():
        return  # not under this root (e.g. a dispatched run's): the job checks it where it runs
    try:
        saved = run.read_config()
    except JobError as error:
        raise ConfigError(f"init.checkpoint={reference}: {error}") from error
    if "model" in tree.spec.groups and isinstance(saved.get("model"), dict):
        _take_model(tree, explicit, reference, saved["model"])
    if "data" in tree.spec.groups and isinstance(saved.get("data"), dict):
        _take_tokenizer(tree, explicit, reference, saved["data"], run)


def _take_model(tree: Any, explicit: set[str], reference: str, source: dict[str, Any]) -> None:
    ours = tree.get("model.name")
    if source.get("name", ours) != ours:
        raise ConfigError(
            f"init.checkpoint={reference} is a {source.get('name')} model; this job trains "
            f"{ours}: start from a {ours} run, or run {source.get('name')}/train/..."
        )
    given = _given(tree, explicit, "model")
    fields = {field.name for field in dataclasses.fields(tree.schemas["model"])}
    for key, value in source.items():
        if key in FREE_MODEL_FIELDS or key not in fields:
            continue
        current = _plain(tree.get(f"model.{key}"))
        if current == value:
            continue
        if f"model.{key}" in given:
            raise ConfigError(
                f"init.checkpoint={reference} was trained with model.{key}={value!r}; "
                f"model.{key}={current!r} contradicts it: drop model.{key}"
            )
        tree.set(f"model.{key}", value)


def _take_tokenizer(
    tree: Any, explicit: set[str], reference: str, source: dict[str, Any], run: RunDir
) -> None:
    wanted = _source_tokenizer(tree, source, run)
    given = _given(tree, explicit, "data")
    kind, source_kind = tree.get("data.tokenizer"), source.get("tokenizer")
    if "data.tokenizer" in given and kind not in (source_kind, wanted["tokenizer"]):
        raise ConfigError(
            f"init.checkpoint={reference} was trained with data.tokenizer={source_kind}; "
            f"data.tokenizer={kind} contradicts it: drop data.tokenizer"
        )
    for key in ("vocab_size", "tokenizer_options"):
        current = _plain(tree.get(f"data.{key}"))
        if f"data.{key}" in given and key in wanted and not _same(key, current, wanted[key]):
            raise ConfigError(
                f"init.checkpoint={reference} brings its tokenizer (data.{key}="
                f"{wanted[key]!r}); data.{key}={current!r} contradicts it: drop data.{key}"
            )
    for key in TOKENIZER_KEYS:
        if key in wanted:
            tree.set(f"data.{key}", wanted[key])


def _same(key: str, current: Any, wanted: Any) -> bool:
    """Whether a given tokenizer value means the source's: equal, or a ``path`` naming a
    ``tokenizer.json`` of the same bytes."""
    if current == wanted:
        return True
    if key != "tokenizer_options" or not isinstance(current, dict):
        return False
    rest = {k: v for k, v in current.items() if k != "path"}
    if rest != {k: v for k, v in wanted.items() if k != "path"}:
        return False
    mine, theirs = _json_bytes(current.get("path")), _json_bytes(wanted.get("path"))
    return mine is not None and mine == theirs


def _json_bytes(path: Any) -> bytes | None:
    """The bytes of the ``tokenizer.json`` a ``tokenizer_options.path`` names, if any."""
    if not path:
        return None
    found = Path(str(path)).expanduser()
    found = found / "tokenizer.json" if found.is_dir() else found
    return found.read_bytes() if found.is_file() else None


def _source_tokenizer(tree: Any, source: dict[str, Any], run: RunDir) -> dict[str, Any]:
    """The ``data.*`` tokenizer settings that reproduce the run's tokenizer byte for byte.

    A trained tokenizer (``bpe``) is the file its run trained: by its settings when they
    name the very folder the run tokenized (same dataset and options: its data is reused),
    else by that file (``hf``), so other data is tokenized with the same vocabulary."""
    settings = {key: source[key] for key in TOKENIZER_KEYS if key in source}
    if source.get("tokenizer") not in TRAINED_TOKENIZERS:
        return settings
    entries = DataRecord(run.path).entries
    if not entries:
        return settings  # it never trained (no checkpoint): the run is refused later
    folder = run.root / entries[0]["path"]
    if _names_folder(tree, settings, run.root, folder):
        return settings
    trained = folder / "tokenizer" / "tokenizer.json"
    if not trained.is_file():
        raise ConfigError(
            f"init.checkpoint={run.name} trained its tokenizer on {folder}, which is gone: "
            f"tokenize it again (a run with {run.name}'s data.* settings does)"
        )
    return {**settings, "tokenizer": "hf", "tokenizer_options": {"path": str(trained)}}


def _names_folder(tree: Any, settings: dict[str, Any], root: Path, folder: Path) -> bool:
    """Whether this job's data, tokenized with ``settings``, is ``folder``."""
    from omegaconf import OmegaConf
    from theseus.core.data.api import dataset_path

    typed: Any = OmegaConf.to_object(tree.node["data"])
    data = dataclasses.replace(typed, **settings)
    try:
        named = dataset_path(root, data, registries=tree.registries)
    except TheseusError:
        return False
    return named.resolve() == folder.resolve()
