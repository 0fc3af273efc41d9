"""Optimizers and learning-rate schedules (Optax), registered through core's plugin."""
