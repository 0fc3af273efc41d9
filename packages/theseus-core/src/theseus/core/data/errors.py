"""Errors of the data layer: each names the file, key or job the user must look at."""

from __future__ import annotations

from theseus.core.errors import TheseusError


class DataError(TheseusError):
    """Bad data input: an empty corpus, a glob matching nothing, a malformed record."""


class DataMissingError(DataError):
    """A tokenized dataset does not exist yet: names the ``data/tokenize/...`` job to run."""


class DataIncompleteError(DataError):
    """A tokenized dataset is still being written or was interrupted."""


class ChecksumError(DataError):
    """A shard is truncated or corrupted: names the file."""


class SettingsConflictError(DataError):
    """An output directory was made with other settings: names both."""


class TokenIdError(DataError):
    """A shard holds a token id outside the vocabulary: names the shard and the id."""
