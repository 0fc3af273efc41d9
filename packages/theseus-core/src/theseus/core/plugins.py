"""Plugin discovery (entry-point group ``theseus``) and the registries plugins fill."""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import os
from collections.abc import Callable
from typing import Any

import pluggy
from theseus.core import hookspecs
from theseus.core.components import Component, JobSpec
from theseus.core.errors import PluginError, TheseusError
from theseus.core.optim.configs import check_component_config
from theseus.core.registry import COMPONENT_KINDS, PluginInfo, Registries, Registry

__all__ = ["PluginInfo", "Registries", "Registry", "load_registries", "registries"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "theseus"
DISABLE_AUTOLOAD_ENV = "THESEUS_DISABLE_PLUGIN_AUTOLOAD"
ALLOW_LIST_ENV = "THESEUS_PLUGINS"

COMPONENT_HOOKS = {kind: f"theseus_register_{kind}" for kind in COMPONENT_KINDS}


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
    registries = Registries(_manager())
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
