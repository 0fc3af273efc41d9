"""The registries plugins fill: one typed :class:`Registry` per kind of thing they provide.

A leaf module: it names no hook and imports nothing of the training stack, so the hook
specifications, the config layer and the jobs may all type-import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pluggy
from theseus.core.components import Component, JobSpec
from theseus.core.errors import PluginError
from theseus.core.requirements import plugin_hint

Entry = TypeVar("Entry")

#: the component kinds, each filled by its ``theseus_register_<kind>`` hook
COMPONENT_KINDS = (
    "models",
    "datasets",
    "tokenizers",
    "optimizers",
    "schedules",
    "evaluations",
    "loggers",
    "dispatch_targets",
    "rewards",
)


@dataclass
class PluginInfo:
    """One discovered plugin: where it came from and what it registered."""

    name: str
    distribution: str
    version: str
    module: str
    registered: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None


class Registry(Generic[Entry]):
    """Name -> entry, remembering which plugin registered each name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._owners: dict[str, PluginInfo] = {}

    def add(self, name: str, entry: Entry, owner: PluginInfo) -> None:
        if name in self._entries:
            first = self._owners[name]
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by plugin {first.name!r} "
                f"(package {first.distribution}) and by plugin {owner.name!r} "
                f"(package {owner.distribution})"
            )
        self._entries[name] = entry
        self._owners[name] = owner
        owner.registered.setdefault(self.kind, []).append(name)

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            raise PluginError(self.unknown_message(name))
        return self._entries[name]

    def unknown_message(self, name: str) -> str:
        from difflib import get_close_matches

        loaded = {owner.distribution for owner in self._owners.values()}
        missing = plugin_hint(self.kind, name, loaded)
        if missing:  # e.g. a data/tokenize job without theseus-data: name the pip command
            return f"unknown {self.kind} {name!r}: {missing}"
        known = sorted(self._entries)
        close = get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = ", ".join(known) if known else "none (is the plugin that provides it installed?)"
        return f"unknown {self.kind} {name!r}{hint} (known: {listing})"

    def owner(self, name: str) -> PluginInfo:
        return self._owners[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, Entry]]:
        for name in self.names():
            yield name, self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class Registries:
    """All registries, filled from the installed plugins (``plugins.load_registries``).

    Each kind is a declared attribute, so a type checker knows ``registries.models`` holds
    :class:`Component` entries and ``registries.jobs`` :class:`JobSpec` ones."""

    def __init__(self, manager: pluggy.PluginManager) -> None:
        self.models: Registry[Component] = Registry("model")
        self.datasets: Registry[Component] = Registry("dataset")
        self.tokenizers: Registry[Component] = Registry("tokenizer")
        self.optimizers: Registry[Component] = Registry("optimizer")
        self.schedules: Registry[Component] = Registry("schedule")
        self.evaluations: Registry[Component] = Registry("evaluation")
        self.loggers: Registry[Component] = Registry("logger")
        self.dispatch_targets: Registry[Component] = Registry("dispatch target")
        self.rewards: Registry[Component] = Registry("reward")
        self.jobs: Registry[JobSpec] = Registry("job")
        self.commands: Registry[Any] = Registry("command")
        self.plugins: list[PluginInfo] = []
        self.manager = manager

    @property
    def hook(self) -> Any:
        """The run-time hooks (``theseus.core.hookspecs`` groups 2-4), called by keyword."""
        return self.manager.hook

    def component(self, kind: str) -> Registry[Component]:
        """The registry of one component kind (a key of ``plugins.COMPONENT_HOOKS``)."""
        registry = getattr(self, kind, None)
        if kind not in COMPONENT_KINDS or not isinstance(registry, Registry):
            raise KeyError(f"no component registry {kind!r}")
        return registry
