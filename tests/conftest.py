"""Suite-wide settings: a persistent JAX compilation cache, CPU-only JAX, and the order in
which ``pytest -n 2 --dist loadfile`` hands out test files (the longest first)."""

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


# The files that take longest, longest first: seconds summed over their tests (setup, call,
# teardown) with --durations=0 in a fresh-clone .ci/run on two cores shared with other work
# (so slower than CI's), main 8ae52fb+. xdist gives a worker one file at a time in
# collection order (pyproject's addopts turn off its own reordering, which put files with the
# most tests first and so the one-test README tour last: the run's last 10 minutes had one
# worker busy). The rest follow in the usual order.
LONGEST_FIRST = [
    "tests/core/test_readme_tour.py",  # 631 s
    "tests/sharding/test_parity.py",  # 318 s
    "tests/train/test_grpo.py",  # 265 s
    "tests/faults/test_inspect_faults.py",  # 241 s
    "tests/train/test_training.py",  # 186 s
    "tests/dispatch/test_dispatch_ssh.py",  # 186 s
    "tests/chips/test_compile_matrix.py",  # 160 s
    "tests/evaluate/test_lm_eval.py",  # 160 s
    "tests/train/test_lora.py",  # 129 s
    "tests/models/test_models_families.py",  # 115 s
    "tests/docs/test_train_on_chips.py",  # 103 s
    "tests/chips/test_grpo_plan.py",  # 96 s
    "tests/train/test_determinism.py",  # 89 s
    "tests/sharding/test_family_parity.py",  # 87 s
    "tests/chips/test_v5e_step.py",  # 80 s
    "tests/sharding/test_split_resume.py",  # 78 s
    "tests/train/test_dpo.py",  # 74 s
    "tests/dispatch/test_dispatch_slurm.py",  # 67 s
    "tests/faults/test_data_faults.py",  # 64 s
    "tests/faults/test_resume_faults.py",  # 63 s
    "tests/sharding/test_reshard.py",  # 62 s
    "tests/train/test_sft.py",  # 61 s
    "tests/train/test_optimizers.py",  # 59 s
    "tests/sharding/test_context_parallel.py",  # 59 s
    "tests/sharding/test_expert_parallel.py",  # 58 s
    "tests/sharding/test_dry_run.py",  # 54 s
    "tests/train/test_base_tokenizer.py",  # 53 s
    "tests/models/test_lora_export.py",  # 51 s
    "tests/faults/test_environment_faults.py",  # 49 s
    "tests/sharding/test_multihost.py",  # 49 s
]


def longest_first(items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        return rank.get(Path(item.path).relative_to(REPO).as_posix(), len(rank))

    items.sort(key=place)  # stable: within a file, and for the rest, the collection order


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
