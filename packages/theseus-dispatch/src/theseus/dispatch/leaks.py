"""Secrets never leave this machine inside a run's description.

A target's ``secrets:`` travel one way only: as environment variables in a 0600 file (or a
Kubernetes Secret). Anything else a submission writes leaves the machine in the clear: the
overrides (into ``bootstrap.sh``, ``submission.json``, the SLURM script, the Job manifest),
the resolved ``config.yaml``, the dry-run plan, and the local state record. So every value
that leaves is checked first, by the one redaction rule (:mod:`theseus.core.redaction`),
and a submission holding what that rule hides is refused in one line that names where the
value was (and which variable holds it), never the value itself:

* the value of a known secret: those of the target's ``secrets:`` and of every local
  environment variable whose name names a credential (``WANDB_API_KEY``, ``GITHUB_PAT``,
  ``DB_PWD``...; :func:`theseus.core.redaction.environment_secrets`), typed as an override
  (``logging.wandb.project=$GITHUB_PAT``, expanded by the shell) or inside the config;
* a credential by name (``data.dataset_options.hf_token=...``) or by shape (a
  ``ghp_...`` token, a URL with ``user:password@``, a private-key block).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from theseus.core.redaction import MIN_LENGTH, environment_secrets, redact_text
from theseus.dispatch.remote import DispatchError


class SecretLeakError(DispatchError):
    """A secret's value would be written where it is not protected."""


def known_secrets(target: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> value of every secret this submission knows of (see the module docstring)."""
    environ = os.environ if environ is None else environ
    named = {
        name: environ[name]
        for name in getattr(target, "secrets", []) or []
        if name in environ and len(environ[name]) >= MIN_LENGTH
    }
    return {**environment_secrets(environ), **named}


def find_leak(text: str, secrets: Mapping[str, str]) -> str | None:
    """The name of a secret whose value is in ``text``, or None."""
    for name, value in secrets.items():
        if value in text:
            return name
    return None


def _hidden_line(text: str) -> str | None:
    """The first line of ``text`` the redaction rule changes, as it shows it (None: none)."""
    shown = redact_text(text, secrets=())
    for before, after in zip(text.split("\n"), shown.split("\n"), strict=True):
        if before != after:
            return after.strip()
    return None


def check_values(values: Iterable[tuple[str, str]], secrets: Mapping[str, str]) -> None:
    """Refuse, naming ``where`` (and the variable), any ``(where, text)`` holding a known
    secret's value or a credential by name or shape."""
    advice = (
        "it would be written in the clear (dispatch plan, bootstrap.sh, submission.json, "
        "config.yaml, local state)"
    )
    for where, text in values:
        name = find_leak(text, secrets)
        if name is not None:
            raise SecretLeakError(
                f"{where} holds the value of the secret ${name}: {advice}; list {name} under "
                "the target's 'secrets:' and read it from the environment on the target instead"
            )
        hidden = _hidden_line(text)
        if hidden is not None:
            raise SecretLeakError(
                f"{where} holds a credential ({hidden!r} as shown with it hidden): {advice}; "
                "put it in a local environment variable listed under the target's 'secrets:' "
                "and read it from the environment on the target instead"
            )


def leaving_values(sub: Any, target: Any) -> list[tuple[str, str]]:
    """Every value of a submission that is written beyond the secrets file, with where."""
    values = [(f"override {o.split('=', 1)[0]}=...", o) for o in sub.overrides]
    values += [("the run name", sub.name), ("the job key", sub.job)]
    values.append(("the resolved config.yaml", sub.config_yaml))
    for key, value in sorted((getattr(target, "env", None) or {}).items()):
        values.append((f"target key 'env.{key}'", f"{key}={value}"))
    for key, value in sorted(getattr(target, "__dict__", {}).items()):
        if isinstance(value, str) and key != "env":
            values.append((f"target key {key!r}", value))
    return values


def check_submission(sub: Any, target: Any, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a submission any value of which (overrides, config, target keys) holds a known
    secret's value; called before anything is printed, written or sent."""
    check_values(leaving_values(sub, target), known_secrets(target, environ))
