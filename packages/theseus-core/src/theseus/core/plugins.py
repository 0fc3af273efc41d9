"""Plugin discovery (entry-point group ``theseus``) and the registries plugins fill."""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pluggy
from theseus.core import hookspecs
from theseus.core.components import Component, JobSpec
from theseus.core.errors import PluginError, TheseusError
from theseus.core.optim.configs import check_component_config
from theseus.core.requirements import plugin_hint

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "theseus"
DISABLE_AUTOLOAD_ENV = "THESEUS_DISABLE_PLUGIN_AUTOLOAD"
ALLOW_LIST_ENV = "THESEUS_PLUGINS"

COMPONENT_HOOKS = {
    "models": "theseus_register_models",
    "datasets": "theseus_register_datasets",
    "tokenizers": "theseus_register_tokenizers",
    "optimizers": "theseus_register_optimizers",
    "schedules": "theseus_register_schedules",
    "evaluations": "theseus_register_evaluations",
    "loggers": "theseus_register_loggers",
    "dispatch_targets": "theseus_register_dispatch_targets",
    "rewards": "theseus_register_rewards",
}


@dataclass
class PluginInfo:
    """One discovered plugin: where it came from and what it registered."""

    name: str
    distribution: str
    version: str
    module: str
    registered: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None


class Registry:
    """Name -> entry, remembering which plugin registered each name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._owners: dict[str, PluginInfo] = {}

    def add(self, name: str, entry: Any, owner: PluginInfo) -> None:
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

    def get(self, name: str) -> Any:
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

    def items(self) -> Iterator[tuple[str, Any]]:
        for name in self.names():
            yield name, self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class Registries:
    """All registries, filled from the installed plugins."""

    def __init__(self) -> None:
        for kind in COMPONENT_HOOKS:
            setattr(self, kind, Registry(kind.rstrip("s").replace("_", " ")))
        self.jobs = Registry("job")
        self.commands = Registry("command")
        self.plugins: list[PluginInfo] = []
        self.manager = _manager()

    @property
    def hook(self) -> Any:
        """The run-time hooks (``theseus.core.hookspecs`` groups 2-4), called by keyword."""
        return self.manager.hook

    def component(self, kind: str) -> Registry:
        return getattr(self, kind)


def _manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _wanted_plugins() -> tuple[bool, set[str] | None]:
    autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "") not in ("1", "true", "yes")
    allow = os.environ.get(ALLOW_LIST_ENV)
    allowed = {n.strip() for n in allow.split(",") if n.strip()} if allow else None
    return autoload, allowed


def _discover() -> list[tuple[PluginInfo, Any]]:
    """Import each entry point of the group; a broken one is reported, not fatal."""
    autoload, allowed = _wanted_plugins()
    found: list[tuple[PluginInfo, Any]] = []
    seen: set[str] = set()
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        if allowed is not None and ep.name not in allowed:
            continue
        if allowed is None and not autoload:
            continue
        dist = ep.dist
        info = PluginInfo(
            name=ep.name,
            distribution=dist.metadata["Name"] if dist else "?",
            version=dist.version if dist else "?",
            module=ep.value,
        )
        try:
            module = ep.load()
        except Exception as error:  # a broken plugin must not take the others down
            info.error = _last_line(error)
            log.warning(
                "plugin %r (package %s) failed to load: %s",
                info.name,
                info.distribution,
                info.error,
            )
            found.append((info, None))
            continue
        found.append((info, module))
    return found


def _last_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text.splitlines()[-1] if text else type(error).__name__


def _call_each(
    pm: pluggy.PluginManager,
    hook_name: str,
    infos: dict[str, PluginInfo],
    make_register: Callable[[PluginInfo], Callable[..., None]],
    **kwargs: Any,
) -> None:
    """Call every implementation of one hook, giving each a `register` bound to its plugin."""
    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        info = infos[impl.plugin_name]
        if info.error:
            continue
        wanted = {k: v for k, v in kwargs.items() if k in impl.argnames}
        if "register" in impl.argnames:
            wanted["register"] = make_register(info)
        try:
            impl.function(**wanted)
        except TheseusError:
            raise
        except Exception as error:
            info.error = _last_line(error)
            log.warning(
                "plugin %r (package %s) failed in %s: %s",
                info.name,
                info.distribution,
                hook_name,
                info.error,
            )


def load_registries() -> Registries:
    """Discover plugins and fill every registry. Cheap: plugin modules import no JAX."""
    registries = Registries()
    pm = registries.manager
    infos: dict[str, PluginInfo] = {}
    for info, module in _discover():
        registries.plugins.append(info)
        infos[info.name] = info
        if module is not None:
            pm.register(module, name=info.name)

    for kind, hook_name in COMPONENT_HOOKS.items():
        registry = registries.component(kind)

        def component_register(info: PluginInfo, registry: Registry = registry) -> Callable:
            def register(component: Component) -> None:
                if not isinstance(component, Component):
                    raise PluginError(
                        f"plugin {info.name!r} registered {component!r} as a {registry.kind}; "
                        "expected a theseus.core.components.Component"
                    )
                registry.add(component.name, component, info)

            return register

        _call_each(pm, hook_name, infos, component_register)
        for name, entry in registry.items():  # after the hook, so duplicates are named first
            owner = registry.owner(name)
            check_component_config(registry.kind, entry, owner.name, owner.distribution)

    def job_register(info: PluginInfo) -> Callable:
        def register(spec: JobSpec) -> None:
            if not isinstance(spec, JobSpec):
                raise PluginError(f"plugin {info.name!r} registered {spec!r}; expected a JobSpec")
            registries.jobs.add(spec.key, spec, info)

        return register

    _call_each(pm, "theseus_register_jobs", infos, job_register, registries=registries)

    def command_register(info: PluginInfo) -> Callable:
        def register(name: str, command: Any) -> None:
            registries.commands.add(name, command, info)

        return register

    _call_each(pm, "theseus_register_commands", infos, command_register)
    return registries


_cached: Registries | None = None


def registries(reload: bool = False) -> Registries:
    """The process-wide registries (discovered once)."""
    global _cached
    if _cached is None or reload:
        _cached = load_registries()
    return _cached
