"""The trainer: loop, state, checkpoints, metrics. Imports JAX only in its submodules."""
