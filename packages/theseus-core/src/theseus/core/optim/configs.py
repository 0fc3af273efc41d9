"""Config schemas of the built-in optimizers and schedules (cheap to import: no JAX).

Every optimizer's config subclasses :class:`OptimizerBase` and every schedule's
:class:`ScheduleBase`; a plugin registering one that does not is refused when it loads
(:func:`check_component_config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from theseus.core.components import option
from theseus.core.errors import PluginError


@dataclass
class OptimizerBase:
    """The options every optimizer has; a registered optimizer's config subclasses it.

    The optimizer contract (``theseus_register_optimizers``): register
    ``Component(name, config=<subclass of OptimizerBase>, target="pkg.module:build")``
    where ``build(config, learning_rate) -> optax.GradientTransformation``. ``config`` is
    the typed ``optimizer`` group (an instance of your class), ``learning_rate`` the schedule
    (a function of the step count) already peaking at ``config.learning_rate``. The
    transformation returns the *update*, learning rate applied and sign included, like
    ``optax.sgd`` (``optax.apply_updates(params, updates)`` takes the step).

    What core adds around it (``theseus.core.optim.build.build_optimizer``), so a plugin
    optimizer honours the base keys without reading them:

    * ``grad_clip``: the gradients are clipped to this global norm before your
      transformation sees them (``with_clipping``);
    * ``weight_decay``: decoupled decay ``p <- p - lr * weight_decay * p`` on the matrices
      (``theseus.core.optim.optimizers.decay_mask``: not norm gains, not biases) is added
      to your update (``with_weight_decay``). When your build applies ``weight_decay``
      itself (say, by passing it to ``optax.adamw``), set the class variable
      ``applies_weight_decay = True`` in your config and core adds none.

    The optimizer state may be any pytree; leaves shaped like their parameter are sharded
    like it (ZeRO, FSDP), others are replicated.
    """

    applies_weight_decay: ClassVar[bool] = False  # True: the build reads weight_decay itself

    learning_rate: float = option(3e-4, "peak learning rate (the schedule scales it)", ge=0)
    weight_decay: float = option(
        0.0,
        "decoupled weight decay (times the learning rate) on matrices, not norms or biases",
        ge=0,
    )
    grad_clip: float = option(1.0, "clip the global gradient norm to this; 0 disables", ge=0)


@dataclass
class AdamWConfig(OptimizerBase):
    applies_weight_decay: ClassVar[bool] = True  # optax.adamw, masked by decay_mask
    learning_rate: float = option(6e-4, "peak learning rate (the schedule scales it)", ge=0)
    weight_decay: float = option(0.1, "decoupled weight decay; norms and biases excluded", ge=0)
    b1: float = option(0.9, "Adam beta1", ge=0, lt=1)
    b2: float = option(0.95, "Adam beta2", ge=0, lt=1)
    eps: float = option(1e-8, "Adam epsilon", ge=0)


@dataclass
class LionConfig(OptimizerBase):
    applies_weight_decay: ClassVar[bool] = True
    learning_rate: float = option(
        1e-4, "peak learning rate (Lion wants ~3-10x lower than AdamW)", ge=0
    )
    weight_decay: float = option(0.1, "decoupled weight decay; norms and biases excluded", ge=0)
    b1: float = option(0.9, "Lion beta1 (update interpolation)", ge=0, le=1)
    b2: float = option(0.99, "Lion beta2 (momentum decay)", ge=0, lt=1)


@dataclass
class SGDConfig(OptimizerBase):
    applies_weight_decay: ClassVar[bool] = True  # added to the gradient (PyTorch's SGD)
    learning_rate: float = option(0.1, "peak learning rate", ge=0)
    momentum: float = option(0.9, "momentum; 0 for plain SGD", ge=0, lt=1)
    nesterov: bool = option(False, "use Nesterov momentum")


@dataclass
class AdafactorConfig(OptimizerBase):
    applies_weight_decay: ClassVar[bool] = True
    learning_rate: float = option(1e-3, "peak learning rate", ge=0)
    decay_rate: float = option(0.8, "second-moment decay exponent", gt=0, le=1)
    clipping_threshold: float = option(1.0, "update clipping threshold", gt=0)


@dataclass
class MuonConfig(OptimizerBase):
    applies_weight_decay: ClassVar[bool] = True  # on the Muon matrices only
    learning_rate: float = option(0.02, "peak learning rate for the orthogonalized updates", ge=0)
    beta: float = option(0.95, "momentum decay", ge=0, lt=1)
    ns_steps: int = option(5, "Newton-Schulz iterations", ge=1)
    adam_learning_rate: float = option(
        3e-4, "peak learning rate of the AdamW for embeddings, norms and biases (no decay)", ge=0
    )


#: ``schedule.warmup_steps=-1``: the warm-up is this fraction of the steps the schedule
#: spans, and at least ``MIN_WARMUP_STEPS`` (a 100-step run warms up over 10, a 9,000-step
#: one over 90)
WARMUP_FRACTION = 0.01
MIN_WARMUP_STEPS = 10
DERIVED_WARMUP_HELP = (
    f"linear warmup from 0 over this many steps (-1: {WARMUP_FRACTION:.0%} of the steps the "
    f"schedule spans, at least {MIN_WARMUP_STEPS})"
)


def warmup_steps(config: Any, span: int) -> int:
    """The warm-up of schedule ``config`` over ``span`` steps: its ``warmup_steps``, or
    (-1) the share of ``span`` it derives; never more than ``span``."""
    given = int(getattr(config, "warmup_steps", 0))
    if given < 0:
        given = max(MIN_WARMUP_STEPS, round(WARMUP_FRACTION * span))
    return max(0, min(given, span))


@dataclass
class ScheduleBase:
    """The options every schedule has; a registered schedule's config subclasses it.

    The schedule contract (``theseus_register_schedules``): register
    ``Component(name, config=<subclass of ScheduleBase>, target="pkg.module:build")``
    where ``build(config, peak_lr, total_steps) -> optax.Schedule``, a jittable function
    of the step count (an int32 array) giving the learning rate. ``peak_lr`` is
    ``optimizer.learning_rate``; ``total_steps`` the steps the schedule spans: the run's
    length, or this group's ``total_steps`` when it is set (a resume with
    ``training.schedule_on_resume=continue`` sets it to keep the old length). Honour
    ``warmup_steps``: ``build`` always sees a count (a ``-1`` the config may declare, "derive
    it from the span", is replaced by :func:`warmup_steps` first).
    """

    warmup_steps: int = option(0, "linear warmup from 0 over this many steps", ge=0)
    total_steps: int = option(
        0,
        "steps the schedule spans; later steps take its final lr (0: the run's length)",
        ge=0,
    )


@dataclass
class ConstantConfig(ScheduleBase):
    pass


@dataclass
class CosineConfig(ScheduleBase):
    warmup_steps: int = option(-1, DERIVED_WARMUP_HELP, ge=-1)
    final_fraction: float = option(0.1, "final learning rate as a fraction of the peak", ge=0, le=1)


@dataclass
class WSDConfig(ScheduleBase):
    warmup_steps: int = option(-1, DERIVED_WARMUP_HELP, ge=-1)
    decay_fraction: float = option(
        0.2, "fraction of the steps spent in the final decay", ge=0, le=1
    )
    final_fraction: float = option(0.0, "final learning rate as a fraction of the peak", ge=0, le=1)


@dataclass
class LinearWarmupConfig(ScheduleBase):
    warmup_steps: int = option(
        100, "linear warmup from 0 over this many steps, then constant", ge=0
    )


#: Registry kind (``Registry.kind``) -> the class a component's config must subclass.
REQUIRED_BASES: dict[str, type] = {"optimizer": OptimizerBase, "schedule": ScheduleBase}


def check_component_config(kind: str, component: Any, plugin: str, distribution: str) -> None:
    """Refuse, in one line, an optimizer or schedule whose config lacks the base class.

    Called when a plugin registers the component, so the mistake is named at load time
    rather than as a config error deep inside a run.
    """

    base = REQUIRED_BASES.get(kind)
    if base is None or issubclass(component.config, base):
        return
    fields = ", ".join(f.name for f in dataclasses.fields(base))
    raise PluginError(
        f"plugin {plugin!r} (package {distribution}) registers {kind} {component.name!r} "
        f"with config class {component.config.__qualname__}, which does not subclass "
        f"{base.__module__}.{base.__name__} (subclass it: it brings {fields})"
    )
