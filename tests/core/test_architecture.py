"""The architecture stays as docs/architecture.md draws it: checked on the source itself."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from theseus.core import hookspecs, plugins

from tests.core.test_import_structure import circles, imports_of, modules

CORE_SRC = Path(__file__).resolve().parents[2] / "packages" / "theseus-core" / "src"
PLUGIN_PACKAGES = re.compile(r"theseus\.(models|data|dispatch)\b")
#: Core's service hooks, in call order: theseus-models and theseus-data answer them.
SERVICE_HOOKS = (
    "theseus_prepare_dataset",
    "theseus_load_tokenizer",
    "theseus_load_hf_model",
    "theseus_save_hf_model",
    "theseus_generate",
    "theseus_sampler",
    "theseus_adapt_model",
)


def core_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module that theseus-core ships."""
    return modules([CORE_SRC])


def test_core_has_no_import_circles_even_through_function_level_imports():
    known = core_modules()
    graph = {name: imports_of(path, name, known) for name, path in known.items()}
    cycles = circles(graph)
    assert not cycles, "import circles in core: " + "; ".join(" -> ".join(c) for c in cycles)
    # the walk sees real edges (a broken walker would pass vacuously)
    assert "theseus.core.train.setup" in graph["theseus.core.train.trainer"]


def test_core_never_names_a_plugin_package_even_in_a_string():
    offenders = [
        f"{path.relative_to(CORE_SRC)}:{number}: {line.strip()}"
        for path in sorted(CORE_SRC.rglob("*"))
        if path.is_file() and path.suffix in (".py", ".md", ".txt", ".toml")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PLUGIN_PACKAGES.search(line)
    ]
    assert not offenders, "core names a plugin package:\n" + "\n".join(offenders)
    assert PLUGIN_PACKAGES.search('load_target("theseus.models.hf:load_hf")')  # the check bites


def hookspec_names() -> list[str]:
    """The hookspecs in the order hookspecs.py defines (and documents) them."""
    names = [n for n, f in vars(hookspecs).items() if n.startswith("theseus_") and callable(f)]
    return sorted(names, key=lambda n: inspect.getsourcelines(getattr(hookspecs, n))[1])


def test_hookspecs_are_documented_in_the_order_plugins_calls_them():
    names = hookspec_names()
    registration = [*plugins.COMPONENT_HOOKS.values(), "theseus_register_jobs"]
    registration.append("theseus_register_commands")
    assert names[: len(registration)] == registration
    runtime = names[len(registration) :]
    assert runtime == [
        "theseus_job_prerequisites",
        *SERVICE_HOOKS,
        "theseus_on_train_start",
        "theseus_on_step_end",
        "theseus_on_eval",
        "theseus_on_checkpoint",
        "theseus_on_train_end",
    ]
    module_doc = hookspecs.__doc__ or ""
    for name in names:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc) > 40, f"{name} has no real docstring"
        if name not in registration:  # run-time hooks are listed in the call-order overview
            assert name in module_doc, f"{name} is missing from hookspecs' call-order overview"


def test_every_service_hook_is_answered_by_an_installed_plugin():
    """theseus-models and theseus-data implement core's service hooks like any plugin."""
    regs = plugins.registries()
    for name in SERVICE_HOOKS:
        owners = {impl.plugin_name for impl in getattr(regs.hook, name).get_hookimpls()}
        assert owners & {"models", "data"}, f"no installed plugin implements {name}"
