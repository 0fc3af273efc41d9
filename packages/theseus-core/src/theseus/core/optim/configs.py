"""Config schemas of the built-in optimizers and schedules (cheap to import: no JAX)."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option


@dataclass
class OptimizerBase:
    learning_rate: float = option(3e-4, "peak learning rate (the schedule scales it)")
    weight_decay: float = option(
        0.0, "decoupled weight decay (times the learning rate) on matrices, not norms or biases"
    )
    grad_clip: float = option(1.0, "clip the global gradient norm to this; 0 disables")


@dataclass
class AdamWConfig(OptimizerBase):
    learning_rate: float = option(6e-4, "peak learning rate (the schedule scales it)")
    weight_decay: float = option(0.1, "decoupled weight decay; norms and biases excluded")
    b1: float = option(0.9, "Adam beta1")
    b2: float = option(0.95, "Adam beta2")
    eps: float = option(1e-8, "Adam epsilon")


@dataclass
class LionConfig(OptimizerBase):
    learning_rate: float = option(1e-4, "peak learning rate (Lion wants ~3-10x lower than AdamW)")
    weight_decay: float = option(0.1, "decoupled weight decay; norms and biases excluded")
    b1: float = option(0.9, "Lion beta1 (update interpolation)")
    b2: float = option(0.99, "Lion beta2 (momentum decay)")


@dataclass
class SGDConfig(OptimizerBase):
    learning_rate: float = option(0.1, "peak learning rate")
    momentum: float = option(0.9, "momentum; 0 for plain SGD")
    nesterov: bool = option(False, "use Nesterov momentum")


@dataclass
class AdafactorConfig(OptimizerBase):
    learning_rate: float = option(1e-3, "peak learning rate")
    decay_rate: float = option(0.8, "second-moment decay exponent")
    clipping_threshold: float = option(1.0, "update clipping threshold")


@dataclass
class MuonConfig(OptimizerBase):
    learning_rate: float = option(0.02, "peak learning rate for the orthogonalized updates")
    beta: float = option(0.95, "momentum decay")
    ns_steps: int = option(5, "Newton-Schulz iterations")
    adam_learning_rate: float = option(
        3e-4, "peak learning rate of the AdamW for embeddings, norms and biases (no decay)"
    )


@dataclass
class ScheduleBase:
    warmup_steps: int = option(0, "linear warmup from 0 over this many steps")


@dataclass
class ConstantConfig(ScheduleBase):
    pass


@dataclass
class CosineConfig(ScheduleBase):
    warmup_steps: int = option(10, "linear warmup from 0 over this many steps")
    final_fraction: float = option(0.1, "final learning rate as a fraction of the peak")


@dataclass
class WSDConfig(ScheduleBase):
    warmup_steps: int = option(10, "linear warmup from 0 over this many steps")
    decay_fraction: float = option(0.2, "fraction of the steps spent in the final decay")
    final_fraction: float = option(0.0, "final learning rate as a fraction of the peak")


@dataclass
class LinearWarmupConfig(ScheduleBase):
    warmup_steps: int = option(100, "linear warmup from 0 over this many steps, then constant")
