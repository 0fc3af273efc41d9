"""Suite-wide settings: a persistent JAX compilation cache, CPU-only JAX, and the order in
which ``pytest -n 2 --dist loadfile`` hands out test files (the longest first, as measured:
tests/durations.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.durations import measured, rank

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".jax_cache"

# Set before anything imports JAX (subprocesses inherit these too).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Most tests compile many tiny programs once and run them for milliseconds: XLA:CPU's
# optimising backend is most of their time (tests/models/test_models_families.py 189 s ->
# 88 s with a cold cache). Programs that run for long (the README tour's jobs) are started
# without it (``runtime_env``). Numbers stay within every test's tolerance: the passes left
# out schedule and vectorise, the float32 arithmetic is the same operations.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ.setdefault("XLA_FLAGS", FAST_COMPILE)


def host_devices(count: int) -> str:
    """XLA_FLAGS for a subprocess with ``count`` simulated CPU devices, the suite's own
    flags kept (both sides of a comparison compile alike)."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"


def runtime_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess that runs long rather than compiles much: this
    one's, without the suite's fast-compile flags (a user's own XLA_FLAGS stay)."""
    env = dict(os.environ, **extra)
    if env.get("XLA_FLAGS") == FAST_COMPILE:
        del env["XLA_FLAGS"]
    return env


def longest_first(items: list[pytest.Item]) -> None:
    """Files in the order of their measured seconds, longest first (tests/durations.py)."""
    table = measured()

    def place(item: pytest.Item) -> float:
        return rank(Path(item.path).relative_to(REPO).as_posix(), table)

    items.sort(key=place)  # stable: within a file, the collection order


def pytest_collection_modifyitems(config, items):
    """The longest files first; where the parity group (and lm-eval) must be present (CI),
    their absence fails instead of skipping."""
    longest_first(items)
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
