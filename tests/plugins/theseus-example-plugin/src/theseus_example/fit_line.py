"""The example job: least squares on a noisy line, with the configured optimizer."""

from __future__ import annotations

import json

from theseus.core.jobs import Job
from theseus.core.optim.build import build_optimizer, build_schedule


class FitLine(Job):
    def __call__(self) -> dict:
        import jax
        import jax.numpy as jnp
        import optax

        task = self.config.task
        key_x, key_noise = jax.random.split(jax.random.key(task.seed))
        x = jax.random.uniform(key_x, (task.points,), minval=-1.0, maxval=1.0)
        y = task.slope * x + task.intercept + task.noise * jax.random.normal(key_noise, x.shape)
        registries, optim = self.context.registries, self.config.optimizer
        schedule = build_schedule(registries, self.config.schedule, optim.learning_rate, task.steps)
        optimizer = build_optimizer(registries, optim, schedule)
        params = {"slope": jnp.zeros(()), "intercept": jnp.zeros(())}
        state = optimizer.init(params)

        def loss_fn(p):
            return jnp.mean((p["slope"] * x + p["intercept"] - y) ** 2)

        @jax.jit
        def step(p, s):
            loss, grads = jax.value_and_grad(loss_fn)(p)
            updates, s = optimizer.update(grads, s, p)
            return optax.apply_updates(p, updates), s, loss

        first = None
        for _ in range(task.steps):
            params, state, loss = step(params, state)
            first = float(loss) if first is None else first
        result = {
            "slope": float(params["slope"]),
            "intercept": float(params["intercept"]),
            "first_loss": first,
            "final_loss": float(loss_fn(params)),
            "optimizer": self.config.optimizer.name,
        }
        (self.run.path / "result.json").write_text(json.dumps(result, indent=2))
        print(json.dumps(result))
        return result
