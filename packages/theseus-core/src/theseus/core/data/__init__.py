"""The data interfaces the trainer consumes: on-disk format, validation, Grain loading.

Depends only on numpy, grain and omegaconf; datasets and tokenizers live in theseus-data.
Importing this package is cheap; Grain is imported by ``api``/``loader`` on first use.
"""

from __future__ import annotations

from typing import Any

from theseus.core.data.batch_plan import BatchPlan, BatchPlanError
from theseus.core.data.config import DataConfig
from theseus.core.data.errors import (
    ChecksumError,
    DataError,
    DataIncompleteError,
    DataMissingError,
    SettingsConflictError,
    TokenIdError,
)

_LAZY = {
    "open_training_data": "theseus.core.data.api",
    "tokenize_prerequisites": "theseus.core.data.api",
    "TrainingData": "theseus.core.data.loader",
    "TokenizedDataset": "theseus.core.data.reader",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


__all__ = [
    "BatchPlan",
    "BatchPlanError",
    "ChecksumError",
    "DataConfig",
    "DataError",
    "DataIncompleteError",
    "DataMissingError",
    "SettingsConflictError",
    "TokenIdError",
    "TokenizedDataset",
    "TrainingData",
    "open_training_data",
    "tokenize_prerequisites",
]
