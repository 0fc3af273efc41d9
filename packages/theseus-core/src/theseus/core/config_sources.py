"""Where a config's values come from, before any schema sees them: ``key=value``
overrides from the command line (YAML scalars, a key given once) and YAML config files
(bounded, strict: a key given twice is an error, as is a file that is not a mapping)."""

from __future__ import annotations

import os
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from theseus.core import safe_yaml
from theseus.core.errors import ConfigError


def parse_overrides(overrides: Iterable[str]) -> list[tuple[str, Any]]:
    """``["a.b=1", ...]`` -> ``[("a.b", 1), ...]``; a key given twice is an error."""
    parsed: list[tuple[str, Any]] = []
    seen: dict[str, str] = {}
    for text in overrides:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {text!r} is not of the form key=value")
        if key in seen:
            raise ConfigError(
                f"config key {key!r} is given twice on the command line "
                f"({seen[key]!r} and {text!r}); give it once"
            )
        seen[key] = text
        try:
            parsed.append((key, _parse_value(raw)))
        except safe_yaml.YAMLLimitError as error:
            raise ConfigError(f"override {key}=...: {safe_yaml.problem(error)}") from error
    return parsed


ConfigSource = str | os.PathLike | Mapping[str, Any]


class _StrictLoader(safe_yaml.BoundedLoader):
    """Bounded safe YAML where a key given twice in one mapping is an error (not: the last wins)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} is given twice (first at line {seen[key]})",
                    key_node.start_mark,
                )
            if isinstance(key, typing.Hashable):
                seen[key] = line
        return super().construct_mapping(node, deep)


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML config file as a nested mapping (``training: {lr: ...}`` or ``training.lr: ...``).

    A missing file, invalid YAML (with its line) and a file that is not a mapping are
    one-line config errors naming the file. An empty file is an empty mapping.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if not path.is_file():
        raise ConfigError(f"config file {path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text") from error
    except OSError as error:
        raise ConfigError(f"config file {path} cannot be read ({error.strerror})") from error
    try:
        data = safe_yaml.load(text, _StrictLoader)
    except safe_yaml.YAMLLimitError as error:
        raise ConfigError(f"config file {path} is refused: {safe_yaml.problem(error)}") from error
    except yaml.YAMLError as error:
        raise ConfigError(
            f"config file {path} is not valid YAML: {safe_yaml.problem(error)}"
        ) from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} holds a YAML {type(data).__name__}, not a mapping of config keys"
        )
    return data


def read_config_source(source: ConfigSource) -> tuple[dict[str, Any], str]:
    """(mapping, the name errors give it) of a config file path or of a mapping."""
    if isinstance(source, Mapping):
        return dict(source), "config mapping"
    return load_config_file(source), f"config file {os.fspath(source)}"


def _parse_value(raw: str) -> Any:
    try:
        value = safe_yaml.load(raw) if raw.strip() else ""
    except safe_yaml.YAMLLimitError:
        raise
    except yaml.YAMLError:
        return raw
    if ":" in raw and isinstance(value, (int, float)):
        return raw  # YAML 1.1 reads 2:4 as the base-60 number 124; keep such text as written
    if isinstance(value, (dict, list, int, float, bool)) or value is None:
        return value
    return raw
