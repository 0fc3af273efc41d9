"""Suite-wide settings: a persistent JAX compilation cache and CPU-only JAX."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".jax_cache"

# Set before anything imports JAX (subprocesses inherit these too).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def pytest_collection_modifyitems(config, items):
    """Where the parity group (and lm-eval) must be present (CI), their absence fails instead
    of skipping."""
    if os.environ.get("THESEUS_REQUIRE_PARITY") != "1":
        return
    try:
        import lm_eval  # noqa: F401
        import peft  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as error:  # pragma: no cover - CI misconfiguration
        raise pytest.UsageError(f"THESEUS_REQUIRE_PARITY=1 but {error}") from error


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fresh theseus root directory."""
    path = tmp_path / "root"
    path.mkdir()
    return path
