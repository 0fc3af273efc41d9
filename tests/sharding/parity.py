"""Sharded vs single-device runs of a tiny GPT, in a process with 8 simulated CPU devices.

``python -m tests.sharding.parity [[dpo@|lora@]STRATEGY:data,fsdp,tensor ...]`` prints one
JSON object per scenario (``dpo@``: the DPO objective against a frozen reference, rows
paired; ``lora@``: adapters trained on a frozen base): the largest relative differences (max |x - x_ref| / max |x_ref|, per array) of the
loss, the gradients and the parameters after 3 SGD-with-momentum steps, the partition specs
of parameters and optimizer state, and per-device bytes. The reference is the same code on
a one-device mesh, so only the layout differs.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from theseus.core.adapters import split_trainable  # noqa: E402
from theseus.core.execution import ExecutionPlan, RematChoice
from theseus.core.recipes.dpo import preference_objective  # noqa: E402
from theseus.core.recipes.preference_config import PreferenceConfig  # noqa: E402
from theseus.core.sharding.config import ShardingConfig  # noqa: E402
from theseus.core.sharding.placement import Layout, path_name, per_device_bytes  # noqa: E402
from theseus.core.train.setup import model_fn  # noqa: E402
from theseus.core.train.state import TrainState  # noqa: E402
from theseus.core.train.step import cross_entropy, make_train_step  # noqa: E402
from theseus.models.gpt.config import GPTConfig  # noqa: E402
from theseus.models.gpt.model import GPT  # noqa: E402

SCENARIOS = [
    "dp:8,1,1",
    "zero1:8,1,1",
    "fsdp:1,8,1",
    "tp:4,1,2",
    "tp:2,1,4",
    "fsdp+tp:2,2,2",
    "zero1+tp:4,1,2",
]
VOCAB, T, B, MICRO, STEPS = 128, 16, 16, 2, 3
MODEL = GPTConfig(vocab_size=VOCAB, n_layers=1, d_model=64, n_heads=4, max_seq_len=T)


def batch_of(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (B, T + 1), dtype=np.int32)
    segments = np.ones((B, T), np.int32)
    segments[:, T // 2 :] += rng.integers(0, 2, (B, 1), dtype=np.int32)  # some rows hold 2 docs
    starts = np.where(segments[:, :1] == segments, 0, T // 2)
    positions = np.arange(T, dtype=np.int32)[None, :] - starts
    mask = (rng.random((B, T)) > 0.1).astype(np.float32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "positions": positions.astype(np.int32),
        "segment_ids": segments,
        "loss_mask": mask,
    }


def run(
    layout: Layout,
    remat: str = "none",
    dpo: bool = False,
    lora: bool = False,
    initial: Any = None,
) -> dict:
    """One scenario's numbers (see the module docstring). ``initial``: the starting state as
    host arrays (the reference's ``out["initial"]``), placed by ``layout`` instead of being
    initialised again under it; without it the state is initialised here, and its host copy
    is ``out["initial"]``."""
    model_class = GPT
    if lora:  # adapters on every projection; only they train, the base rides along frozen
        from theseus.core.train.configs import LoRAConfig
        from theseus.models.layers.lora import adapted_class

        model_class = adapted_class(GPT, LoRAConfig(rank=4, alpha=8.0))

    execution = ExecutionPlan(remat=RematChoice(remat, "the level under test"))

    def build() -> Any:
        model = model_class(MODEL, rngs=nnx.Rngs(params=jax.random.key(0)), execution=execution)
        if lora:  # B away from zero, so that A's gradients are not all zero either
            for _, module in nnx.iter_graph(model):
                if hasattr(module, "lora_b"):
                    b = module.lora_b[...]
                    module.lora_b[...] = 0.02 * jnp.cos(jnp.arange(b.size).reshape(b.shape))
        return model

    graphdef, _, rest = nnx.split(nnx.eval_shape(build), nnx.Param, ...)
    if jax.tree.leaves(rest):  # adapters' layer indices
        rest = jax.jit(lambda: nnx.split(build(), nnx.Param, ...)[2])()
    optimizer = optax.sgd(0.5, momentum=0.9)
    objective = cross_entropy(graphdef, rest)
    if dpo:  # rows 2p, 2p + 1 are a pair; the reference is a frozen copy of the start
        objective = preference_objective(PreferenceConfig())(model_fn(graphdef, rest), False)

    def fresh() -> TrainState:
        _, params, _ = nnx.split(build(), nnx.Param, ...)
        params, frozen = split_trainable(params, lora)
        frozen = jax.tree.map(jnp.copy, params) if dpo else frozen
        return TrainState.fresh(params, optimizer, frozen)

    state, shardings, grad_fn = placed(layout, fresh, objective, initial)
    first = layout.place_batch(batch_of(0))
    grads, (ce, count, _) = grad_fn(state.params, state.frozen, first)
    out = {
        "initial": jax.device_get(state) if initial is None else initial,  # before donation
        "loss0": float(per_token(ce, count)),
        "grads": {key: per_token(g, count) for key, g in to_flat(grads).items()},
        "param_specs": specs_of(state.params),
        "param_shapes": {k: list(v.shape) for k, v in to_flat(state.params).items()},
        "opt_shapes": {k: list(v.shape) for k, v in to_flat(state.opt_state).items()},
        "opt_specs": specs_of(state.opt_state),
        "param_bytes": per_device_bytes(state.params),
        "opt_bytes": per_device_bytes(state.opt_state),
    }
    step = layout.jit_step(
        make_train_step(
            graphdef,
            rest,
            optimizer,
            optax.constant_schedule(0.5),
            MICRO,
            False,
            micro_sharding=layout.micro_sharding(),
            grad_shardings=layout.grad_shardings(state.params),
            objective=objective,
        ),
        shardings,
    )
    losses = []
    for index in range(STEPS):
        state, metrics = step(state, layout.place_batch(batch_of(index)))
        losses.append(float(metrics["loss"]))
    out["losses"] = losses
    out["params"] = to_flat(state.params)
    return out


def per_token(total: Any, count: Any) -> Any:
    """``total / count`` in float32 on the host (correctly rounded, the same for the
    reference and every layout), without compiling an eager division per array and layout
    (XLA's, compiled per shape and sharding, cost a tenth of each scenario)."""
    return np.asarray(total, np.float32) / np.float32(count)


def to_flat(tree: Any) -> dict[str, np.ndarray]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {path_name(path): np.asarray(jax.device_get(leaf)) for path, leaf in flat}


def specs_of(tree: Any) -> dict[str, list]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {path_name(path): normal(leaf.sharding.spec) for path, leaf in flat}


def normal(spec: Any) -> list:
    """A spec as a JSON list without trailing Nones (tuples of axes as lists)."""
    parts = [list(p) if isinstance(p, tuple) else p for p in spec]
    while parts and parts[-1] is None:
        parts.pop()
    return parts


def rel(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest per-array ``max|a - b| / max|b|``; the scale of an array is floored at 1e-3 of
    the tree's largest magnitude, since some gradients are zero analytically (a key bias
    does not change a softmax) and hold only rounding noise (1e-11 here)."""
    floor = 1e-3 * max(float(np.max(np.abs(ref))) for ref in b.values())
    worst = 0.0
    for key, ref in b.items():
        scale = max(float(np.max(np.abs(ref))), floor)
        worst = max(worst, float(np.max(np.abs(a[key] - ref))) / scale)
    return worst


def scalar_rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def config_of(text: str) -> tuple[ShardingConfig, str]:
    """``[dpo@]strategy:data,fsdp,tensor[:remat]``."""
    strategy, sizes, *rest = text.removeprefix("dpo@").removeprefix("lora@").split(":")
    data, fsdp, tensor = (int(s) for s in sizes.split(","))
    remat = rest[0] if rest else "none"
    return ShardingConfig(
        strategy=strategy, data=data, fsdp=fsdp, tensor=tensor, remat=remat
    ), remat


def main(scenarios: list[str]) -> None:
    one_device = Layout(ShardingConfig(), jax.devices()[:1])
    references: dict[str, Any] = {}
    for text in scenarios:
        config, remat = config_of(text)
        kind = text.split("@")[0] if "@" in text else ""
        flags = {"dpo": kind == "dpo", "lora": kind == "lora"}
        if kind not in references:
            references[kind] = run(one_device, **flags)
        reference = references[kind]
        # the reference's starting state, placed by the layout: only the layout differs
        got = run(Layout(config), remat, initial=reference["initial"], **flags)
        print(
            json.dumps(
                {
                    "scenario": text,
                    "loss": scalar_rel(
                        [got["loss0"], *got["losses"]], [reference["loss0"], *reference["losses"]]
                    ),
                    "grads": rel(got["grads"], reference["grads"]),
                    "params": rel(got["params"], reference["params"]),
                    "param_specs": got["param_specs"],
                    "opt_specs": got["opt_specs"],
                    "param_shapes": got["param_shapes"],
                    "opt_shapes": got["opt_shapes"],
                    "mesh": dict(Layout(config).sizes),
                    "param_bytes": got["param_bytes"],
                    "opt_bytes": got["opt_bytes"],
                    "ref_param_bytes": reference["param_bytes"],
                    "ref_opt_bytes": reference["opt_bytes"],
                }
            ),
            flush=True,
        )


def placed(
    layout: Layout, fresh: Any, objective: Any, initial: Any = None
) -> tuple[TrainState, TrainState, Any]:
    """The state ``fresh()`` makes, placed by ``layout``, its shardings, and the jitted
    gradient of ``objective`` on a placed batch (in the layout's gradient shardings).

    ``initial``: that state already made (host arrays, from the one-device reference), put
    into the layout's shardings rather than initialised again: the same values (the
    compared runs start from one state), without compiling the initialisation (1-2 s of
    XLA:CPU per layout and model) once more for every layout."""
    shardings = jax.eval_shape(fresh).shardings(layout)
    if initial is None:
        state = jax.jit(fresh, out_shardings=shardings)()
    else:
        state = jax.device_put(initial, shardings)
    grad_fn = jax.jit(
        jax.grad(lambda p, f, b: objective(p, f, b, None), has_aux=True),
        in_shardings=(shardings.params, shardings.frozen, layout.batch_sharding),
        out_shardings=(layout.grad_shardings(state.params), layout.replicated),
    )
    return state, shardings, grad_fn


if __name__ == "__main__":
    main(sys.argv[1:] or SCENARIOS)
