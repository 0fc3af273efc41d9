"""Strict typed configs: the schemas of a job's components in, one OmegaConf tree out.

A job's tree has one node per group (``training``, ``optimizer``, ``model`` ...). A fixed
group is the structured config of its dataclass. A :class:`Choice` group is the schema of
the component named by ``<group>.name``; setting that name swaps in the new component's
schema. Every node is in struct mode: unknown keys and wrongly typed values are errors.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf import errors as oc_errors
from theseus.core.components import Choice, JobSpec, option
from theseus.core.errors import ConfigError, ConfigKeyError, ConfigTypeError, MissingConfigError
from theseus.core.ranges import check_value, choices_of, range_of

if TYPE_CHECKING:
    from theseus.core.registry import Registries

NAME_HELP = "which registered component to use; choosing one swaps in its own options"


def component_schema(group: str, component_name: str, config_type: type) -> type:
    """The group schema of a chosen component: its config dataclass plus a leading ``name``.

    The schema subclasses the component's own config, so the typed config a job receives
    *is* an instance of it (``isinstance(config.optimizer, AdamWConfig)``), with ``name``
    first in the YAML. Hashable, so a model config can be a static argument of ``jax.jit``.
    """
    named = dataclasses.make_dataclass(
        f"Named{config_type.__name__}", [("name", str, option(component_name, NAME_HELP))]
    )
    return dataclasses.make_dataclass(
        f"{group.title()}{config_type.__name__}", [], bases=(config_type, named), unsafe_hash=True
    )


def _type_name(tp: Any) -> str:
    if tp is Any:
        return "any"
    origin = typing.get_origin(tp)
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        name = getattr(origin, "__name__", str(origin))
        if name in ("Union", "UnionType"):
            return " | ".join(_type_name(a) for a in typing.get_args(tp))
        return f"{name}[{args}]"
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def closest_name(typed: str, names: list[str]) -> str | None:
    """The name the user most likely meant: an abbreviation (``lr``), a prefix, or a typo."""
    for name in names:
        if "".join(word[:1] for word in name.split("_")) == typed and "_" in name:
            return name
    prefixed = [n for n in names if n.startswith(typed)]
    if typed and len(prefixed) == 1:
        return prefixed[0]
    matches = get_close_matches(typed, names, n=1, cutoff=0.6)
    return matches[0] if matches else None


class ConfigTree:
    """A job's config: a struct-mode OmegaConf tree plus the schemas that typed it."""

    def __init__(self, spec: JobSpec, registries: Registries) -> None:
        self.spec = spec
        self.registries = registries
        self.schemas: dict[str, type] = {}
        self.node: DictConfig = OmegaConf.create({})
        for group, kind in spec.groups.items():
            if isinstance(kind, Choice):
                self._choose(group, kind, kind.default)
            else:
                self._set_group(group, kind)
        OmegaConf.set_struct(self.node, True)

    # ------------------------------------------------------------------ building
    def _set_group(self, group: str, schema: type) -> None:
        self.schemas[group] = schema
        with open_dict(self.node):
            self.node[group] = OmegaConf.structured(schema)
        OmegaConf.set_struct(self.node[group], True)

    def _choose(self, group: str, choice: Choice, name: str) -> None:
        registry = self.registries.component(choice.registry)
        if name not in registry:
            raise ConfigError(f"{group}.name: {registry.unknown_message(name)}")
        component = registry.get(name)
        self._set_group(group, component_schema(group, name, component.config))

    def _apply_preset(self, group: str, choice: Choice, parent: DictConfig, value: Any) -> None:
        """``<group>.preset=NAME`` sets the values of the component's preset NAME."""
        component = self.registries.component(choice.registry).get(parent.name)
        presets = component.extra.get("presets", {})
        if value not in presets and value != "":
            known = ", ".join(sorted(presets)) or "none"
            raise ConfigError(
                f"config key '{group}.preset': {component.name} has no preset {value!r} "
                f"(known: {known})"
            )
        for key, preset_value in presets.get(value, {}).items():
            self.set(f"{group}.{key}", preset_value)
        parent.preset = value

    # ------------------------------------------------------------------ access
    def get(self, key: str) -> Any:
        parent, leaf = self._resolve_parent(key)
        return parent[leaf]

    def set(self, key: str, value: Any) -> None:
        """Set one dotted key, strictly: unknown keys and wrong types are errors."""
        parent, leaf = self._resolve_parent(key)
        group = key.split(".")[0]
        choice = self.spec.groups.get(group)
        if leaf == "name" and key == f"{group}.name" and isinstance(choice, Choice):
            if not isinstance(value, str):
                raise ConfigTypeError(f"config key {key!r} expects str, got {value!r}")
            if value == parent.name:
                return
            if choice.locked:
                raise ConfigError(
                    f"config key {key!r} is fixed to {parent.name!r} by job {self.spec.key}"
                )
            self._choose(group, choice, value)
            return
        if leaf == "preset" and key == f"{group}.preset" and isinstance(choice, Choice):
            self._apply_preset(group, choice, parent, value)
            return
        if self._is_group(parent, leaf, key):  # task={steps: 4}: its keys, one by one
            if not isinstance(value, Mapping):
                raise ConfigTypeError(
                    f"config key {key!r} is a group of keys, not a value; set its keys "
                    f"({key}.KEY=VALUE) or give a mapping, got {value!r}"
                )
            self.apply(flatten(dict(value), key, self))
            return
        value = _coerce(self._field_type(key), value)
        self.check_range(key, value)
        try:
            parent[leaf] = value
        except (oc_errors.ValidationError, oc_errors.KeyValidationError) as error:
            raise ConfigTypeError(self._type_message(key, parent, leaf, value)) from error
        except (oc_errors.ConfigAttributeError, oc_errors.ConfigKeyError) as error:
            raise ConfigKeyError(self._unknown_message(key, parent, leaf)) from error

    def apply(self, overrides: Iterable[tuple[str, Any]]) -> None:
        """Apply parsed overrides; component choices (``group.name``) go first."""
        items = list(overrides)
        names = [(k, v) for k, v in items if k.count(".") == 1 and k.endswith(".name")]
        presets = [(k, v) for k, v in items if k.count(".") == 1 and k.endswith(".preset")]
        rest = [kv for kv in items if kv not in names and kv not in presets]
        for key, value in names + presets + rest:
            self.set(key, value)

    def _is_group(self, parent: DictConfig, leaf: str, key: str) -> bool:
        """Whether ``key`` is a group (or nested dataclass) of keys, not a dict value."""
        if OmegaConf.is_missing(parent, leaf) or self.is_mapping_field(key):
            return False
        return isinstance(parent[leaf], DictConfig)

    def merge(self, data: Mapping[str, Any], source: str | None = None) -> None:
        """Set every leaf of a nested mapping (a config file, a saved config) strictly.

        Component choices (``<group>.name``) go first, so that the rest is read against the
        chosen components' schemas; a dict-typed field (``data.mixture``) is one value and
        replaces the old one whole; ``???`` (a value still missing) is skipped. Errors are
        prefixed with ``source`` (the file's name).
        """
        try:
            leaves = flatten(dict(data), tree=self)
            keys = [key for key, _ in leaves]
            twice = sorted({key for key in keys if keys.count(key) > 1})
            if twice:  # training.seq_len and training: {seq_len: ...} in one file
                raise ConfigError(f"config key {twice[0]!r} is given twice; give it once")
            choices = [
                (k, v)
                for k, v in leaves
                if k.count(".") == 1
                and k.endswith(".name")
                and isinstance(self.spec.groups.get(k[:-5]), Choice)
            ]
            self.apply(choices)
            rest = flatten(dict(data), tree=self)  # again: the choices changed the schemas
            self.apply([(k, v) for k, v in rest if v != MISSING and (k, v) not in choices])
        except ConfigError as error:
            if source is None:
                raise
            raise type(error)(f"{source}: {error}") from error

    def _resolve_parent(self, key: str) -> tuple[DictConfig, str]:
        parts = key.split(".")
        node: Any = self.node
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, DictConfig) or not _has(node, part):
                prefix = ".".join(parts[:depth])
                rest = ".".join(parts[depth + 1 :])
                raise ConfigKeyError(self._unknown_message(key, node, part, prefix, rest))
            node = node[part]
        if not isinstance(node, DictConfig):
            raise ConfigKeyError(f"config key {key!r}: {'.'.join(parts[:-1])} is not a group")
        if not _has(node, parts[-1]):
            raise ConfigKeyError(self._unknown_message(key, node, parts[-1]))
        return node, parts[-1]

    def _unknown_message(
        self, key: str, node: Any, part: str, prefix: str | None = None, rest: str = ""
    ) -> str:
        base = key.rsplit(".", 1)[0] if prefix is None else prefix
        siblings = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
        close = closest_name(part, siblings)
        suggestion: str | None
        if close is not None:
            suggestion = f"{base}.{close}" if base else close
            suggestion = f"{suggestion}.{rest}" if rest else suggestion
        else:
            matches = get_close_matches(key, list(self.keys()), n=1, cutoff=0.6)
            suggestion = matches[0] if matches else None
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        return f"unknown config key {key!r} for job {self.spec.key}{hint}"

    def _type_message(self, key: str, parent: DictConfig, leaf: str, value: Any) -> str:
        expected = _type_name(self._field_type(key))
        return f"config key {key!r} expects {expected}, got {value!r} ({type(value).__name__})"

    def _field(self, key: str) -> tuple[Any, str]:
        """(type, help) of the schema field at dotted ``key``; ``(Any, "")`` past the schema."""
        field_type, found = self._schema_field(key)
        return field_type, found.metadata.get("help", "") if found is not None else ""

    def _schema_field(self, key: str) -> tuple[Any, dataclasses.Field | None]:
        """(type, dataclass field) at dotted ``key``; ``(Any, None)`` past the schema."""
        parts = key.split(".")
        schema: Any = self.schemas.get(parts[0])
        field_type: Any = schema if schema is not None else Any
        found: dataclasses.Field | None = None
        for part in parts[1:]:
            if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
                return Any, found
            fields = {f.name: f for f in dataclasses.fields(schema)}
            if part not in fields:
                return Any, None
            found = fields[part]
            field_type = typing.get_type_hints(schema).get(part, found.type)
            schema = field_type
        return field_type, found

    def check_range(self, key: str, value: Any) -> None:
        """Refuse ``value`` for ``key`` in one line when it is outside the field's range."""
        found = self._schema_field(key)[1]
        if found is None or value is MISSING:
            return
        problem = check_value(key, value, found.metadata)
        if problem is not None:
            raise ConfigError(problem)

    def range_text(self, key: str) -> str:
        """The declared range of ``key`` as an interval (``[1, inf)``) or its choices
        (``{none, full}``); "" when none."""
        found = self._schema_field(key)[1]
        if found is not None and choices_of(found.metadata):
            return "{" + ", ".join(choices_of(found.metadata)) + "}"
        declared = range_of(found.metadata) if found is not None else None
        return declared.interval() if declared is not None else ""

    def resume_safe(self, key: str) -> bool:
        """Whether ``key`` may change when a run resumes (declared by its schema field)."""
        found = self._schema_field(key)[1]
        return bool(found is not None and found.metadata.get("resume_safe"))

    def _field_type(self, key: str) -> Any:
        return self._field(key)[0]

    def is_mapping_field(self, key: str) -> bool:
        """Whether ``key`` is a field typed as a dict (its keys are data, not schema)."""
        return typing.get_origin(self._field_type(key)) is dict or self._field_type(key) is dict

    # ------------------------------------------------------------------ validation
    def missing_keys(self) -> list[str]:
        return sorted(OmegaConf.missing_keys(self.node))

    def validate(self) -> None:
        """All required values present; raise one error listing every missing key."""
        missing = self.missing_keys()
        if missing:
            listing = ", ".join(missing)
            raise MissingConfigError(
                f"job {self.spec.key} needs values for: {listing} (set them as key=value)"
            )

    def check(self) -> None:
        """Build every group that holds all its values as its typed object, so that the
        group's own checks (``__post_init__``: a model whose heads do not divide) run as
        when a job takes the config; a group still missing values is ``validate``'s."""
        for group in self.node.keys():
            if not OmegaConf.missing_keys(self.node[group]):
                OmegaConf.to_object(self.node[group])

    # ------------------------------------------------------------------ output
    def keys(self) -> Iterator[str]:
        for key, _ in self._leaves():
            yield key

    def _leaves(self) -> Iterator[tuple[str, Any]]:
        """(dotted key, value) of every leaf; a dict-typed field is one leaf, even empty."""
        return _walk(self.node, "", self.is_mapping_field)

    def to_object(self, config_type: type | None = None) -> Any:
        """The validated config as typed objects: each group an instance of its schema.

        ``config_type`` (a dataclass with one field per group, e.g. ``TrainJobConfig``) gets
        the groups as keyword arguments; without it, a dataclass made from the groups.
        """
        self.validate()
        groups = {str(k): OmegaConf.to_object(self.node[k]) for k in self.node.keys()}
        if config_type is None:
            name = "".join(w.title() for w in re.split(r"[/_.-]", self.spec.key)) + "Config"
            config_type = dataclasses.make_dataclass(
                name, [(group, self.schemas[group]) for group in groups]
            )
        return config_type(**groups)

    def to_container(self) -> dict[str, Any]:
        container = OmegaConf.to_container(self.node, resolve=True, throw_on_missing=False)
        assert isinstance(container, dict)  # the tree's root is a mapping of groups
        return {str(key): value for key, value in container.items()}

    def to_yaml(self) -> str:
        return OmegaConf.to_yaml(self.node)

    def describe(self) -> list[dict[str, Any]]:
        """One entry per leaf: key, value, type and help."""
        rows = []
        for key, value in self._leaves():
            row = {
                "key": key,
                "value": value,
                "type": _type_name(self._field_type(key)),
                "help": self._field(key)[1],
            }
            if self.range_text(key):
                row["range"] = self.range_text(key)
            rows.append(row)
        return rows

    def annotated_yaml(self) -> str:
        """YAML of the resolved config, each leaf followed by its type and help."""
        lines: list[str] = []
        last_path: list[str] = []
        for row in self.describe():
            parts = row["key"].split(".")
            for depth, part in enumerate(parts[:-1]):
                if last_path[: depth + 1] != parts[: depth + 1]:
                    lines.append("  " * depth + f"{part}:")
            last_path = parts[:-1]
            value = row["value"]
            shown = "???" if value is MISSING else _flow(value)
            kind = row["type"] + (f" in {row['range']}" if "range" in row else "")
            comment = f"# {kind}" + (f": {row['help']}" if row["help"] else "")
            lines.append("  " * (len(parts) - 1) + f"{parts[-1]}: {shown}  {comment}")
        return "\n".join(lines) + "\n"


def _as_float(value: Any) -> Any:
    """Ints and numeric strings ("3e-3", which YAML reads as a string) become floats."""
    if isinstance(value, int):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value  # OmegaConf reports the type error with the key
    return value


def _has(node: DictConfig, key: str) -> bool:
    """Whether ``key`` exists in ``node``, also when its value is still missing (``???``)."""
    return key in node.keys()


def _coerce(field_type: Any, value: Any) -> Any:
    """Numbers for float fields become floats, also inside ``dict[str, float]`` and
    ``list[float]`` values, as the command line and YAML give ints and "3e-3" strings."""
    if field_type is float and not isinstance(value, bool):
        return _as_float(value)
    origin, args = typing.get_origin(field_type), typing.get_args(field_type)
    if origin is dict and len(args) == 2 and isinstance(value, Mapping):
        return {k: _coerce(args[1], v) for k, v in value.items()}
    if origin is list and len(args) == 1 and isinstance(value, list):
        return [_coerce(args[0], v) for v in value]
    if dataclasses.is_dataclass(field_type) and isinstance(value, Mapping):
        return _structured(field_type, value)
    return value


def _structured(schema: Any, value: Mapping) -> DictConfig:
    """A mapping as a typed node of dataclass ``schema`` (an element of a list of
    dataclasses, e.g. a stage of ``data.mixture_schedule``); unknown keys and wrong types
    are one line naming the schema's field."""
    hints = typing.get_type_hints(schema)
    known = {f.name for f in dataclasses.fields(schema)}
    for key in value:
        if key not in known:
            close = closest_name(str(key), sorted(known))
            hint = (
                f"; did you mean {close!r}?" if close else f" (known: {', '.join(sorted(known))})"
            )
            raise ConfigKeyError(f"{schema.__name__} has no key {key!r}{hint}")
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(schema), {k: _coerce(hints[k], v) for k, v in value.items()}
        )
    except oc_errors.ValidationError as error:
        where = getattr(error, "full_key", None) or "?"
        reason = str(error).splitlines()[0]
        raise ConfigTypeError(f"{schema.__name__}.{where}: {reason}") from None
    assert isinstance(merged, DictConfig)  # a dataclass schema merges into a mapping
    return merged


def _flow(value: Any) -> str:
    """A value as one line of YAML: ``{a: 1.0, b: 2.0}``, ``[val-ppl]``, ``'3'``."""
    text = yaml.safe_dump(
        value, default_flow_style=True, width=float("inf"), sort_keys=False, allow_unicode=True
    )
    return text.strip().removesuffix("...").strip()


def _walk(node: Any, prefix: str, is_leaf: Any = None) -> Iterator[tuple[str, Any]]:
    for key in node.keys():
        full = f"{prefix}.{key}" if prefix else str(key)
        if OmegaConf.is_missing(node, key):
            yield full, MISSING
            continue
        child = node[key]
        if isinstance(child, DictConfig) and not (is_leaf is not None and is_leaf(full)):
            yield from _walk(child, full, is_leaf)
        elif isinstance(child, (DictConfig, ListConfig)):
            yield full, OmegaConf.to_container(child, resolve=True)
        else:
            yield full, child


class ConfigView:
    """Attribute access into a :class:`ConfigTree` with strict, one-line errors.

    ``q.config.training.per_device_batch_size = 8`` goes through here: unknown keys,
    wrong types and component swaps (``q.config.optimizer.name = "lion"``) are handled
    by the tree. Python gives values as they are: a string for a number or a bool
    (``"0.1"``) is refused, where the command line and YAML files, which give text, have
    ``"3e-3"`` read as a number. ``view.node`` is the underlying OmegaConf ``DictConfig``.
    """

    __slots__ = ("_tree", "_path")

    def __init__(self, tree: ConfigTree, path: str = "") -> None:
        object.__setattr__(self, "_tree", tree)
        object.__setattr__(self, "_path", path)

    def _key(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    @property
    def node(self) -> DictConfig:
        return self._tree.get(self._path) if self._path else self._tree.node

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._tree.get(self._key(name))
        if isinstance(value, DictConfig):
            return ConfigView(self._tree, self._key(name))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        key = self._key(name)
        expected = self._tree._field_type(key)
        if isinstance(value, str) and expected in (int, float, bool):  # Python gives numbers
            raise ConfigTypeError(
                f"config key {key!r} expects {expected.__name__}, got {value!r} (str): give "
                "the value itself, not its text"
            )
        self._tree.set(key, value)

    __getitem__ = __getattr__
    __setitem__ = __setattr__

    def __contains__(self, name: str) -> bool:
        return name in self.node

    def __iter__(self) -> Iterator[str]:
        return iter(str(k) for k in self.node.keys())

    def __dir__(self) -> list[str]:
        return list(self)

    def __repr__(self) -> str:
        return OmegaConf.to_yaml(self.node)


def flatten(data: Any, prefix: str = "", tree: ConfigTree | None = None) -> list[tuple[str, Any]]:
    """Dotted leaves of a nested dict; a field typed as a dict stays one leaf."""
    if isinstance(data, dict) and not (
        prefix and tree is not None and tree.is_mapping_field(prefix)
    ):
        items: list[tuple[str, Any]] = []
        for key, value in data.items():
            items.extend(flatten(value, f"{prefix}.{key}" if prefix else str(key), tree))
        return items
    return [(prefix, data)]
