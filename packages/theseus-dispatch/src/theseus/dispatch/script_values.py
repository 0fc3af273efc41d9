"""Values written into generated scripts are data, never code: the one quoting rule.

A value (a path, an override, an environment value, a host) is written into a script or a
command line only as one shell word made by :func:`shlex.quote`
(:func:`theseus.dispatch.remote.q`), and only where a word stands: an argument, or the
right-hand side of an assignment. Never inside double quotes, where ``$(...)`` and
backticks still run: a script that needs a value in a message or a default
(``"${VAR:-...}"``) assigns it first, at its top (:func:`assignments`), and uses
``"$NAME"`` below. A value that cannot be quoted into what it must be (a host, a name) is
refused when the config is read (:mod:`theseus.dispatch.value_shapes`).

Two places quoting does not protect, whatever the value's source (the command line, the
dispatch config, a plugin):

* a control character (a newline above all): it ends a ``#`` comment line or an
  ``#SBATCH`` directive, and what follows runs as a command; no value here needs one;
* an ``#SBATCH`` line, which sbatch parses itself: its values must be plain words
  (:data:`SBATCH_SAFE`).
"""

from __future__ import annotations

import re
from typing import Any

from theseus.dispatch.remote import DispatchError, q

SBATCH_SAFE = re.compile(r"^[A-Za-z0-9_.:,=/@%+~-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ScriptValueError(DispatchError):
    """A value cannot be written into a generated script safely."""


def check_plain(where: str, value: Any) -> None:
    """No control character in ``value`` (str), or one line naming ``where``."""
    if isinstance(value, str) and (found := _CONTROL.search(value)):
        raise ScriptValueError(
            f"{where} holds a control character ({found.group(0)!r}); a value written into a "
            "generated script may not (it would end the line it is on)"
        )


def check_submission(sub: Any, target: Any, target_name: str) -> None:
    """Every string a generated script may hold: the submission's and the target's."""
    for override in sub.overrides:
        check_plain(f"override {override.split('=', 1)[0]!r}", override)
    check_plain("the run name", sub.name)
    check_plain("the job key", sub.job)
    for key, value in getattr(target, "__dict__", {}).items():
        if isinstance(value, str):
            check_plain(f"target {target_name!r}: key {key!r}", value)
        elif isinstance(value, list | tuple):
            for item in value:
                check_plain(f"target {target_name!r}: key {key!r}", item)
        elif isinstance(value, dict):
            for name, item in value.items():
                check_plain(f"target {target_name!r}: key '{key}.{name}'", name)
                check_plain(f"target {target_name!r}: key '{key}.{name}'", item)


def check_sbatch(where: str, value: str) -> str:
    """A value of an ``#SBATCH`` line: a plain word, or one line naming ``where``."""
    if not SBATCH_SAFE.match(value):
        raise ScriptValueError(
            f"{where} {value!r} cannot be written on an #SBATCH line: use letters, digits "
            "and _.:,=/@%+~- only (no spaces or quotes)"
        )
    return value


def assignments(values: dict[str, Any], export: bool = False) -> str:
    """``NAME=<quoted value>`` lines (``export NAME=...`` with ``export``), one per value:
    the only way a generated script takes a value; each is refused, naming it, when it holds
    a control character."""
    lines = []
    for name, value in values.items():
        check_plain(f"the value of {name}", value)
        lines.append(f"{'export ' if export else ''}{name}={q(value)}")
    return "\n".join(lines)
