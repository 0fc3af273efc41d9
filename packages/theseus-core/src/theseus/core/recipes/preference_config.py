"""The ``dpo`` config group: which preference loss, and its constants (cheap to import: no JAX).

The formulas live in :mod:`theseus.core.recipes.preference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.errors import ConfigError
from theseus.core.ranges import check_config

LOSSES = ("sigmoid", "ipo", "simpo")


@dataclass
class PreferenceConfig:
    loss: str = option(
        "sigmoid",
        "sigmoid (DPO), ipo (IPO, per-token averaged log-ratios) or simpo (reference-free SimPO)",
        choices=LOSSES,
    )
    beta: float = option(
        0.1, "β: DPO/SimPO reward scale; for ipo the regulariser τ (target margin 1/(2β))", gt=0
    )
    label_smoothing: float = option(
        0.0,
        "ε in [0, 0.5): probability that a pair's label is flipped (cDPO); sigmoid/simpo",
        ge=0,
        lt=0.5,
    )
    simpo_gamma: float = option(
        0.5, "SimPO target reward margin γ itself (as TRL's simpo_gamma), not the paper's γ/β", ge=0
    )

    def __post_init__(self) -> None:
        check_config(self, "dpo")  # ranges and choices
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ConfigError(f"dpo.beta={self.beta!r}: expected a finite number > 0")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ConfigError(
                f"dpo.label_smoothing={self.label_smoothing!r}: expected a number in [0, 0.5)"
            )
        if self.label_smoothing and self.loss == "ipo":
            raise ConfigError(
                f"dpo.label_smoothing={self.label_smoothing!r}: applies to the sigmoid and "
                "simpo losses only, not ipo (set it to 0)"
            )
        if not math.isfinite(self.simpo_gamma):
            raise ConfigError(f"dpo.simpo_gamma={self.simpo_gamma!r}: expected a finite number")
