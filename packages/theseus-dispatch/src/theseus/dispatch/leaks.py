"""Secrets never leave this machine inside a run's description.

A target's ``secrets:`` travel one way only: as environment variables in a 0600 file (or a
Kubernetes Secret). Anything else a submission writes leaves the machine in the clear: the
overrides (into ``bootstrap.sh``, ``submission.json``, the SLURM script, the Job manifest),
the resolved ``config.yaml``, the dry-run plan, and the local state record. A secret's
*value* typed into an override (``logging.wandb.project=$WANDB_API_KEY``, expanded by the
shell) would ride along in all of them, so every value that leaves is checked against the
known secret values first, and the submission is refused in one line that names where the
value was and which variable holds it (never the value itself).

Known secret values: those of the target's ``secrets:`` and of every local environment
variable whose name names a credential (:func:`theseus.core.redaction.is_secret_name`:
``WANDB_API_KEY``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...), at least
:data:`MIN_LENGTH` characters long (a shorter value would match innocent text).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from theseus.core.redaction import is_secret_name
from theseus.dispatch.remote import DispatchError

MIN_LENGTH = 8


class SecretLeakError(DispatchError):
    """A secret's value would be written where it is not protected."""


def known_secrets(target: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> value of every secret this submission knows of (see the module docstring)."""
    environ = os.environ if environ is None else environ
    names = set(getattr(target, "secrets", []) or [])
    names |= {name for name in environ if is_secret_name(name)}
    return {
        name: environ[name]
        for name in sorted(names)
        if name in environ and len(environ[name]) >= MIN_LENGTH
    }


def find_leak(text: str, secrets: Mapping[str, str]) -> str | None:
    """The name of a secret whose value is in ``text``, or None."""
    for name, value in secrets.items():
        if value in text:
            return name
    return None


def check_values(values: Iterable[tuple[str, str]], secrets: Mapping[str, str]) -> None:
    """Refuse, naming ``where`` and the variable, any ``(where, text)`` holding a secret."""
    for where, text in values:
        name = find_leak(text, secrets)
        if name is not None:
            raise SecretLeakError(
                f"{where} holds the value of the secret ${name}: it would be written in the "
                "clear (dispatch plan, bootstrap.sh, submission.json, config.yaml, local state); "
                f"list {name} under the target's 'secrets:' and read it from the environment "
                "on the target instead"
            )


def leaving_values(sub: Any, target: Any) -> list[tuple[str, str]]:
    """Every value of a submission that is written beyond the secrets file, with where."""
    values = [(f"override {o.split('=', 1)[0]}=...", o) for o in sub.overrides]
    values += [("the run name", sub.name), ("the job key", sub.job)]
    values.append(("the resolved config.yaml", sub.config_yaml))
    for key, value in sorted((getattr(target, "env", None) or {}).items()):
        values.append((f"target key 'env.{key}'", str(value)))
    for key, value in sorted(getattr(target, "__dict__", {}).items()):
        if isinstance(value, str) and key != "env":
            values.append((f"target key {key!r}", value))
    return values


def check_submission(sub: Any, target: Any, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a submission any value of which (overrides, config, target keys) holds a known
    secret's value; called before anything is printed, written or sent."""
    check_values(leaving_values(sub, target), known_secrets(target, environ))
