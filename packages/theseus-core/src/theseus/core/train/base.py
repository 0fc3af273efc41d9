"""Where a run's weights come from when its checkpoints do not hold them all.

A LoRA run checkpoints its adapters alone. Its frozen base is read again from its source
whenever the run starts or is restored: the Hugging Face folder of ``init.hf``, the run that
``init.checkpoint`` names (with that run's own adapters merged in), or the seeded
initialisation. Each source gives the same bits every time, so a restored LoRA run continues
bit for bit.

``run_weights`` reads another run's parameters with that run's own config (whatever its
optimizer, whether it trained adapters): what ``init.checkpoint`` starts from.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
from theseus.core.adapters import cast_frozen, split_trainable
from theseus.core.errors import JobError


def frozen_base(setup: Any, root: str, fresh: dict | None = None) -> nnx.State:
    """The frozen parameters of a run set up by ``setup``: a LoRA run's base, a DPO run's
    reference (its initial weights), else nothing.

    ``fresh`` is a fresh state of ``setup`` when the caller has one already.
    """
    if not setup.adapted and not setup.keeps_reference:
        return nnx.State({})
    fresh = fresh if fresh is not None else setup.init_state()
    weights = initial_weights(setup, root, fresh["frozen"])
    return cast_frozen(weights, setup.config.lora.base_dtype) if setup.adapted else weights


def initial_weights(setup: Any, root: str, like: nnx.State) -> nnx.State:
    """Parameters shaped and placed like ``like``, from ``init.hf`` or ``init.checkpoint``;
    ``like`` itself (the seeded initialisation) when neither is set."""
    init = setup.config.init
    if init.hf:
        from theseus.core.train.hf_init import params_from_hf

        return params_from_hf(setup.registries, init.hf, like)
    if init.checkpoint:
        _, weights = run_weights(root, init.checkpoint, setup.registries, setup.vocab_size)
        from theseus.core.train.weights import placed_like

        return placed_like(weights, like, f"init.checkpoint={init.checkpoint}")
    return like


def run_weights(root: str, reference: str, registries: Any, vocab_size: int) -> tuple[int, Any]:
    """``(step, parameters)`` of run ``RUN`` (newest checkpoint) or ``RUN@STEP``: every
    parameter of a plain model, a LoRA run's adapters merged into its base."""
    from theseus.core.jobs import parse_reference
    from theseus.core.rundir import RunDir
    from theseus.core.train.checkpoints import Checkpoints, abstract_of
    from theseus.core.train.setup import TrainSetup

    name, at_most = parse_reference(reference, "init.checkpoint")
    other = RunDir(root, name)
    if not other.checkpoint_dir.is_dir():
        raise JobError(f"run {name!r} has no checkpoints under {other.checkpoint_dir}")
    setup = TrainSetup.build(saved_train_config(other, registries), registries, vocab_size)
    source = Checkpoints(other.checkpoint_dir, 1000, 0, False)
    try:
        steps = source.steps()
        if at_most is not None and at_most not in steps:
            raise JobError(f"run {name!r} has no checkpoint at step {at_most} (it has {steps})")
        restored = source.restore_latest(
            setup.checkpointed_abstract, abstract_of(setup.data_rng()), at_most
        )
    finally:
        source.close()
    if restored is None:
        raise JobError(f"run {name!r} has no checkpoints")
    step, state, _, _ = restored
    params = nnx.merge_state(state["params"], frozen_base(setup, root))
    if setup.adapted:
        model = setup.model(params)
        model.merge_adapters()
        params = split_trainable(nnx.split(model, nnx.Param, ...)[1], True)[1]
    return step, params


def saved_train_config(run: Any, registries: Any) -> Any:
    """A training run's typed config, from its ``config.yaml``."""
    import yaml
    from theseus.core import safe_yaml
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.configs import TrainJobConfig

    key = run.read_record().get("key", "")
    try:
        base = safe_yaml.load(run.config_path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        why = safe_yaml.problem(error) if isinstance(error, yaml.YAMLError) else error
        raise JobError(f"{run.config_path} cannot be read: {why}") from error
    spec = job_spec(key, registries)
    config_type = getattr(spec.load(), "config_type", None)
    if not (isinstance(config_type, type) and issubclass(config_type, TrainJobConfig)):
        raise JobError(f"run {run.name!r} is a {key} run, not a training run")
    return config_for(spec, registries, (), base).to_object(config_type)
