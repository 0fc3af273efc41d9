"""The theseus-dispatch plugin: registers through the entry point group ``theseus``."""

from __future__ import annotations

from theseus.core.hookspecs import hookimpl  # noqa: F401
