"""``init.hf=DIR`` decides the model config; its weights are read when the run starts
(:mod:`theseus.core.train.opening`, through the plugin that answers ``theseus_load_hf_model``).

The values the folder's ``config.json`` implies are
the defaults of ``model.*`` (:func:`fill_model_from_hf`, called when the config is resolved),
and a value given explicitly that contradicts them is an error naming both, raised before
any job starts. A model component takes part by naming, in ``extra["hf_config"]``, a
function ``(model name, config.json as a dict) -> {field: value}`` (theseus-models does for
every family with a Hugging Face mapping); for other models only the parameter shapes are
checked, when the weights are loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core import safe_json
from theseus.core.components import load_target
from theseus.core.errors import ConfigError, TheseusError
from theseus.core.plugins import registries as default_registries

if TYPE_CHECKING:
    from theseus.core.registry import Registries

# -------------------------------------------------------------------------- the model config


def hf_model_values(registries: Registries, model: str, directory: str) -> dict[str, Any] | None:
    """The ``model.*`` values ``DIR/config.json`` implies for model ``model``; ``None`` when
    there is no such file or the model has no Hugging Face mapping (``extra["hf_config"]``)."""

    path = Path(directory) / "config.json"
    target = registries.models.get(model).extra.get("hf_config") if model else None
    if not target or not path.is_file():
        return None
    try:
        hf = safe_json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigError(f"init.hf: {path} is not readable JSON ({error})") from error
    if not isinstance(hf, dict):
        raise ConfigError(f"init.hf: {path} does not hold a JSON object")
    try:
        return dict(load_target(target)(model, hf))
    except TheseusError as error:
        raise ConfigError(f"init.hf: {directory}: {error}") from error


def _contradiction(
    key: str, given: Any, found: Any, directory: str, preset: str = ""
) -> ConfigError:
    what = (
        f"model.preset={preset} sets {key}={given!r}, which" if preset else f"model.{key}={given!r}"
    )
    fix = "drop the preset" if preset else f"drop model.{key}"
    return ConfigError(
        f"init.hf: {what} contradicts {key}={found!r} that "
        f"{Path(directory) / 'config.json'} implies; {fix} to take it from there"
    )


def fill_model_from_hf(tree: Any, explicit: Iterable[str] = ()) -> None:
    """With ``init.hf`` set, fill ``model.*`` of a resolved config tree from config.json.

    ``explicit``: the keys given on the command line. They, the values a given
    ``model.preset`` set, and any value that differs from its schema default (from a config
    file or a saved config) count as given: each must equal config.json's, or this raises a
    :class:`ConfigError` naming both values. The other fields take config.json's values.
    """
    groups = tree.spec.groups
    if "init" not in groups or "model" not in groups or not tree.get("init.hf"):
        return
    directory = str(tree.get("init.hf"))
    model = tree.get("model.name")
    values = hf_model_values(tree.registries, model, directory)
    if values is None:
        return
    explicit = set(explicit)
    given = set(explicit)
    preset = tree.get("model.preset")
    presets = tree.registries.models.get(model).extra.get("presets", {})
    from_preset = set(presets.get(preset, {})) if preset else set()
    if "model.preset" in given:
        given |= {f"model.{key}" for key in from_preset}
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(tree.schemas["model"])
        if f.default is not dataclasses.MISSING
    }
    for key, value in values.items():
        current = tree.get(f"model.{key}")
        if current == value:
            continue
        if f"model.{key}" in given or current != defaults.get(key, current):
            by_preset = preset if key in from_preset and f"model.{key}" not in explicit else ""
            raise _contradiction(key, current, value, directory, by_preset)
        tree.set(f"model.{key}", value)


def check_model_against_hf(
    model_config: Any, directory: str, registries: Registries | None = None
) -> None:
    """The typed ``model`` config agrees with what ``DIR/config.json`` implies (configs built
    without :func:`fill_model_from_hf`, e.g. from Python, are checked here before any work)."""
    if registries is None:
        registries = default_registries()
    values = hf_model_values(registries, getattr(model_config, "name", ""), directory) or {}
    for key, value in values.items():
        current = getattr(model_config, key, value)
        if current != value:
            raise _contradiction(key, current, value, directory)
