"""Errors of theseus-data (all TheseusError subclasses: one line, exit code 2)."""

from __future__ import annotations

from theseus.core.data.errors import DataError


class TokenizerError(DataError):
    """A tokenizer cannot be built or loaded (missing file, network needed, bad id)."""


class BadRecordError(DataError):
    """A record of an input file is malformed: names the file and line."""
