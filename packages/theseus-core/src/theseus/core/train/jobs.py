"""Training jobs generated for every registered model (cheap to import: no JAX)."""

from __future__ import annotations


def register_training_jobs(register, registries) -> None:
    """Register ``<model>/train/pretrain`` and ``<model>/train/sft`` for each model."""
    # Filled in by the training issue.
    return None
