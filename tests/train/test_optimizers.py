"""Every registered optimizer and schedule: checked against Optax and a formula, then trained.

The names come from the registries, so an optimizer or schedule registered later (by core or
by a plugin) is picked up at once and fails here until it has a reference below.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from theseus.core.optim.build import build_optimizer, build_schedule
from theseus.core.plugins import registries
from theseus.core.runner import config_for, job_spec, run

from tests.train.conftest import TINY, metrics

REGISTRIES = registries()
OPTIMIZERS = REGISTRIES.optimizers.names()
SCHEDULES = REGISTRIES.schedules.names()


def train_config(*overrides: str):
    """The typed config of gpt/train/pretrain, resolved as a run resolves it."""
    spec = job_spec("gpt/train/pretrain", REGISTRIES)
    return config_for(spec, REGISTRIES, list(overrides)).to_object()


# ---------------------------------------------------------------------- one update vs Optax


def param(key, shape, axes):
    """A parameter as a model hands it over: an nnx.Param carrying its logical axis names."""
    return nnx.Param(jax.random.normal(key, shape), out_sharding=axes, eager_sharding=False)


def parameters(seed: int = 0) -> nnx.State:
    """A small tree with every kind of leaf the optimizers tell apart.

    Plain arrays (a 2-D matrix big enough for Adafactor to factor, a 1-D bias) and what the
    decoder produces: blocks stacked on a leading ``layers`` axis (so a norm gain is 2-D),
    an attention kernel that keeps heads apart, an attention bias that is heads x head_dim,
    experts stacked inside a layer, a kernel Adafactor factors, and an embedding.
    """
    k = iter(jax.random.split(jax.random.key(seed), 16))
    return nnx.State(
        {
            "w": jax.random.normal(next(k), (130, 128)),
            "b": jax.random.normal(next(k), (128,)),
            "blocks": {
                "attention": {
                    "q_proj": {
                        "kernel": param(
                            next(k), (2, 16, 2, 8), ("layers", "embed", "heads", "head_dim")
                        ),
                        "bias": param(next(k), (2, 2, 8), ("layers", "heads", "head_dim")),
                    },
                    "o_proj": {
                        "kernel": param(
                            next(k), (2, 2, 8, 16), ("layers", "heads", "head_dim", "embed")
                        ),
                    },
                },
                "mlp": {
                    "w_up": param(next(k), (2, 3, 16, 24), ("layers", "experts", "embed", "mlp")),
                    "router": {
                        "kernel": param(next(k), (2, 16, 3), ("layers", "embed", "experts"))
                    },
                    "down_proj": {  # both dims >= 128: Adafactor factors it
                        "kernel": param(next(k), (2, 136, 128), ("layers", "mlp", "embed"))
                    },
                },
                "norm": {"scale": param(next(k), (2, 16), ("layers", "embed"))},
            },
            "embed": {"embedding": param(next(k), (40, 16), ("vocab", "embed"))},
        }
    )


def gradients(params, seed: int, scale: float):
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(params))))
    return jax.tree.map(lambda p: scale * jax.random.normal(next(keys), p.shape), params)


# Which leaves of `parameters()` are matrices (weight decay), written out by hand.
DECAYED = nnx.State(
    {
        "w": True,
        "b": False,
        "blocks": {
            "attention": {"q_proj": {"kernel": True, "bias": False}, "o_proj": {"kernel": True}},
            "mlp": {"w_up": True, "router": {"kernel": True}, "down_proj": {"kernel": True}},
            "norm": {"scale": False},
        },
        "embed": {"embedding": True},
    }
)

# Muon's (reduction axes, output axes) per leaf; None: the leaf goes to Muon's AdamW part
# (vectors, norm gains, biases, embeddings). Stacked axes (layers, experts) are batch axes.
Dims = optax.contrib.MuonDimensionNumbers
MUON_DIMS = nnx.State(
    {
        "w": Dims(0, 1),
        "b": None,
        "blocks": {
            "attention": {
                "q_proj": {"kernel": Dims(1, (2, 3)), "bias": None},
                "o_proj": {"kernel": Dims((1, 2), 3)},
            },
            "mlp": {
                "w_up": Dims(2, 3),
                "router": {"kernel": Dims(1, 2)},
                "down_proj": {"kernel": Dims(1, 2)},
            },
            "norm": {"scale": None},
        },
        "embed": {"embedding": None},
    }
)
# Under Muon only the Muon matrices decay (its AdamW part has no mask, so no decay).
MUON_DECAYED = jax.tree.map(
    lambda d: d is not None, MUON_DIMS, is_leaf=lambda x: x is None or isinstance(x, Dims)
)


def reference(name: str, lr: optax.Schedule) -> optax.GradientTransformation:
    """Optax's own optimizer, with the registered defaults written out by hand."""
    clip = optax.clip_by_global_norm(1.0)  # every built-in: grad_clip=1.0
    if name == "adamw":
        inner = optax.adamw(lr, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1, mask=DECAYED)
        return optax.chain(clip, inner)
    if name == "lion":
        return optax.chain(clip, optax.lion(lr, b1=0.9, b2=0.99, weight_decay=0.1, mask=DECAYED))
    if name == "sgd":
        return optax.chain(clip, optax.sgd(lr, momentum=0.9, nesterov=False))
    if name == "adafactor":
        return optax.chain(clip, optax.adafactor(lr, decay_rate=0.8, clipping_threshold=1.0))
    if name == "muon":
        muon = optax.contrib.muon(
            lr,
            ns_steps=5,
            beta=0.95,
            weight_decay=0.0,
            adam_learning_rate=lambda step: lr(step) * (3e-4 / 0.02),  # peak 3e-4 vs 0.02
            muon_weight_dimension_numbers=MUON_DIMS,
        )
        return optax.chain(clip, muon)
    if name == "signum":  # the example plugin's: sign of the momentum, no clipping
        sign = optax.stateless(lambda updates, params: jax.tree.map(jnp.sign, updates))
        return optax.chain(optax.trace(decay=0.9), sign, optax.scale_by_learning_rate(lr))
    pytest.fail(f"optimizer {name!r} has no reference in {__file__}: add one")


def test_the_registries_list_the_builtins():  # or every parametrized test here passes empty
    assert {"adamw", "lion", "sgd", "adafactor", "muon"} <= set(OPTIMIZERS)
    assert {"constant", "linear-warmup", "cosine", "wsd"} <= set(SCHEDULES)


def test_leaf_kinds_are_read_from_axis_names_and_names():
    from theseus.core.optim.optimizers import decay_mask, muon_dimensions

    params = parameters()
    leaf = lambda x: x is None or isinstance(x, Dims)  # noqa: E731
    assert jax.tree.leaves(decay_mask(params)) == jax.tree.leaves(DECAYED)
    ours = jax.tree.leaves(muon_dimensions(params), is_leaf=leaf)
    expected = jax.tree.leaves(MUON_DIMS, is_leaf=leaf)
    normalize = lambda d: d and tuple(tuple(np.atleast_1d(a)) for a in d)  # noqa: E731
    assert [normalize(d) for d in ours] == [normalize(d) for d in expected]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_update_matches_optax_with_the_defaults_written_out(name):
    def lr(step):  # a rate that changes every step, so a mixed-up schedule shows
        return 1e-3 * (step + 1)

    ours = build_optimizer(REGISTRIES, train_config(f"optimizer.name={name}").optimizer, lr)
    theirs = reference(name, lr)
    params = parameters()
    ours_state, theirs_state = ours.init(params), theirs.init(params)
    ours_params = theirs_params = params
    # Global norm ~24, then ~0.24: the first and last updates are clipped, the middle not.
    for step, scale in enumerate((0.1, 0.001, 0.1)):
        grads = gradients(params, seed=100 + step, scale=scale)
        ours_update, ours_state = ours.update(grads, ours_state, ours_params)
        theirs_update, theirs_state = theirs.update(grads, theirs_state, theirs_params)
        # The same Optax operations in the same order on the same inputs (run op by op on
        # one CPU device, which is deterministic): the results must be equal bit for bit.
        for a, b in zip(jax.tree.leaves(ours_update), jax.tree.leaves(theirs_update), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"step {step}")
        ours_params = optax.apply_updates(ours_params, ours_update)
        theirs_params = optax.apply_updates(theirs_params, theirs_update)
    moved = [
        float(jnp.abs(a - b).max())
        for a, b in zip(jax.tree.leaves(ours_params), jax.tree.leaves(params), strict=True)
    ]
    assert min(moved) > 0, moved  # every leaf was updated: the check compared real updates


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_weight_decay_shrinks_matrices_by_lr_times_decay_and_nothing_else(name):
    """With a zero gradient an update is the weight decay alone: ``-lr * weight_decay * p`` on
    the matrices (AdamW's decoupled convention, whatever the optimizer), 0 elsewhere."""
    lr, decay = 0.01, 0.05
    config = train_config(f"optimizer.name={name}", f"optimizer.weight_decay={decay}")
    optimizer = build_optimizer(REGISTRIES, config.optimizer, optax.constant_schedule(lr))
    params = parameters()
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = optimizer.update(zeros, optimizer.init(params), params)
    after = optax.apply_updates(params, updates)
    decayed = MUON_DECAYED if name == "muon" else DECAYED
    for path, is_decayed in jax.tree_util.tree_flatten_with_path(decayed)[0]:
        before_leaf = np.asarray(_at(params, path))
        after_leaf = np.asarray(_at(after, path))
        where = jax.tree_util.keystr(path)
        if is_decayed:  # float32 p * (1 - lr*wd) vs p - lr*wd*p: a rounding apart, not 5e-4
            np.testing.assert_allclose(
                after_leaf, before_leaf * (1 - lr * decay), rtol=1e-6, err_msg=where
            )
        else:
            np.testing.assert_array_equal(after_leaf, before_leaf, err_msg=where)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_keeps_axis_names_only_on_arrays_shaped_like_their_parameter(name):
    """The layout places an optimizer-state leaf wrapped in an nnx.Variable by the axis names
    it carries (that is how ZeRO and FSDP shard the moments), so such a leaf must be an array
    of a parameter's shape and axes; and an update must return the state in the structure
    init made (the step is jitted with the state's shardings, the state donated)."""
    config = train_config(f"optimizer.name={name}")
    optimizer = build_optimizer(REGISTRIES, config.optimizer, optax.constant_schedule(1e-3))
    params = parameters()
    kinds = {(_axes(v), tuple(v.get_value().shape)) for v in _variables(params)}
    state = jax.eval_shape(optimizer.init, params)
    _, updated = jax.eval_shape(optimizer.update, gradients(params, 1, 0.1), state, params)
    for tree in (state, updated):
        for variable in _variables(tree):
            value = variable.get_value()
            assert hasattr(value, "shape"), f"{name}: a Variable wraps {value!r}"
            assert (_axes(variable), tuple(value.shape)) in kinds, (name, variable)
    assert jax.tree.structure(updated) == jax.tree.structure(state)


def _variables(tree):
    is_variable = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
    return [x for x in jax.tree.leaves(tree, is_leaf=is_variable) if is_variable(x)]


def _axes(variable):
    return tuple(variable.get_metadata().get("out_sharding") or ())


def _at(tree, path):
    node = tree
    for key in path:
        node = node[key.key]
    return node.get_value() if isinstance(node, nnx.Variable) else node


# ---------------------------------------------------------------------- schedules vs formulas


def expected_lr(name: str, config, peak: float, total: int, step: int) -> float:
    """The learning rate each schedule's documentation promises, in float64."""
    warmup = getattr(config, "warmup_steps", 0)
    if warmup < 0:  # derived from the span: 1% of it, at least 10 steps
        warmup = max(10, round(total / 100))
    warmup = max(0, min(warmup, total))
    if step < warmup and name in ("constant", "linear-warmup", "cosine", "wsd"):
        return peak * step / warmup  # linear from 0
    if name in ("constant", "linear-warmup"):
        return peak
    if name == "cosine":  # from the peak after warmup to final_fraction * peak at `total`
        end, span = peak * config.final_fraction, max(total - warmup, 1)
        t = min(step - warmup, span) / span
        return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * t))
    if name == "wsd":  # stable at the peak, then linear to final_fraction * peak at `total`
        end = peak * config.final_fraction
        decay = max(1, round(total * config.decay_fraction))
        start = max(warmup, total - decay)
        if step < start:
            return peak
        return peak + (end - peak) * min(step - start, decay) / decay
    if name == "step-decay":
        return peak * config.factor ** (step // config.every)
    pytest.fail(f"schedule {name!r} has no formula in {__file__}: add one")


SCHEDULE_CASES = {
    "constant": [[], ["schedule.warmup_steps=5"], ["schedule.warmup_steps=50"]],
    "linear-warmup": [[], ["schedule.warmup_steps=0"], ["schedule.warmup_steps=7"]],
    "cosine": [
        [],
        ["schedule.warmup_steps=0", "schedule.final_fraction=0.0"],
        ["schedule.warmup_steps=30"],
    ],
    "wsd": [
        [],
        ["schedule.warmup_steps=0", "schedule.decay_fraction=0.5", "schedule.final_fraction=0.1"],
        ["schedule.warmup_steps=3", "schedule.decay_fraction=0.02"],
    ],
    "step-decay": [[], ["schedule.every=3", "schedule.factor=0.3"]],
}


@pytest.mark.parametrize(
    "name,overrides",
    [(n, o) for n in SCHEDULES for o in SCHEDULE_CASES.get(n, [[]])],
    ids=lambda v: ",".join(v) if isinstance(v, list) else v,
)
def test_schedule_follows_its_formula(name, overrides):
    peak, total = 2e-3, 20
    config = train_config(f"schedule.name={name}", *overrides, f"optimizer.learning_rate={peak}")
    schedule = build_schedule(REGISTRIES, config.schedule, peak, total)
    steps = range(total + 3)  # past the end too: it stays at the final value
    got = [float(schedule(jnp.asarray(s, jnp.int32))) for s in steps]
    want = [expected_lr(name, config.schedule, peak, total, s) for s in steps]
    # float32 (eps 1.2e-7) through a few ops, a cosine at most: 1e-6 of the peak is slack
    # enough for rounding and far below any difference of a step or a phase.
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * peak)


@pytest.mark.parametrize("name", ["cosine", "wsd"])
def test_the_default_warmup_is_a_share_of_the_run(name):
    """Warm-up 1% of the steps, at least 10: a 100-step run warms up over 10 steps (as it
    did before the warm-up scaled), 1000 steps over 10, 9000 over 90 (not 10)."""
    peak = 1e-3
    config = train_config(f"schedule.name={name}", f"optimizer.learning_rate={peak}")
    assert config.schedule.warmup_steps == -1  # the default: derived
    for total, warmup in ((100, 10), (1000, 10), (9000, 90), (5, 5)):
        schedule = build_schedule(REGISTRIES, config.schedule, peak, total)
        last_rising = float(schedule(jnp.asarray(warmup - 1, jnp.int32)))
        assert last_rising == pytest.approx(peak * (warmup - 1) / warmup, rel=1e-5), total
        assert float(schedule(jnp.asarray(warmup, jnp.int32))) == pytest.approx(peak, rel=1e-5)


# ---------------------------------------------------------------------- tiny training runs

STEPS = 10
# A peak rate per optimizer at which a tiny GPT learns visibly in 10 steps.
TRAIN_OPTIMIZER = {
    "adamw": ["optimizer.learning_rate=3e-3"],
    "lion": ["optimizer.learning_rate=1e-3"],  # sign updates: ~3x smaller than AdamW's
    "sgd": ["optimizer.learning_rate=0.5"],
    "adafactor": ["optimizer.learning_rate=0.1"],  # relative to each parameter's RMS
    "muon": ["optimizer.adam_learning_rate=3e-3"],  # Muon's own 0.02 is the default
    "signum": ["optimizer.learning_rate=3e-3"],
}
# Settings under which a schedule shows its shape within 10 steps.
TRAIN_SCHEDULE = {
    "constant": ["schedule.warmup_steps=2"],
    "linear-warmup": ["schedule.warmup_steps=3"],
    "cosine": ["schedule.warmup_steps=2"],
    "wsd": ["schedule.warmup_steps=2", "schedule.decay_fraction=0.3"],
    "step-decay": ["schedule.every=4"],
}
# One run per optimizer and per schedule: zip the two lists, cycling the shorter.
RUNS = [
    (OPTIMIZERS[i % len(OPTIMIZERS)], SCHEDULES[i % len(SCHEDULES)])
    for i in range(max(len(OPTIMIZERS), len(SCHEDULES)))
]


@pytest.mark.parametrize("optimizer,schedule", RUNS, ids=[f"{o}+{s}" for o, s in RUNS])
def test_tiny_run_learns_and_logs_the_schedule(shared_root, optimizer, schedule):
    overrides = [
        *TINY,
        f"training.total_steps={STEPS}",
        "eval.every=0",
        f"optimizer.name={optimizer}",
        *TRAIN_OPTIMIZER.get(optimizer, []),
        f"schedule.name={schedule}",
        *TRAIN_SCHEDULE.get(schedule, ["schedule.warmup_steps=2"]),
    ]
    name = f"optim-{optimizer}-{schedule}"
    run("gpt/train/pretrain", overrides, root=shared_root, name=name)
    rows = [r for r in metrics(shared_root, name) if "train/loss" in r]
    assert [r["step"] for r in rows] == list(range(STEPS))
    losses = [r["train/loss"] for r in rows]
    # At lr 0 the mean of two batches' losses moves by ~0.05 nats from batch to batch;
    # each of these runs falls by 0.3 nats or more. Demand 0.15.
    first, last = np.mean(losses[:2]), np.mean(losses[-2:])
    assert last < first - 0.15, (optimizer, schedule, losses)

    # The logged rate is the schedule's value at each step: the same float32 computation.
    config = train_config(*overrides)
    peak = config.optimizer.learning_rate
    schedule_fn = jax.jit(build_schedule(REGISTRIES, config.schedule, peak, STEPS))
    logged = [r["train/lr"] for r in rows]
    assert logged == [float(schedule_fn(jnp.asarray(s, jnp.int32))) for s in range(STEPS)]
    formula = [expected_lr(schedule, config.schedule, peak, STEPS, s) for s in range(STEPS)]
    np.testing.assert_allclose(logged, formula, rtol=1e-6, atol=1e-6 * peak)
    assert len(set(logged)) > 2  # the run saw the schedule's shape, not one constant
