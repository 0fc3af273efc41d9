"""The config fields of a routed mixture of experts (``layers/moe.py``), shared by the MoE
families' configs (cheap to import: no JAX).

``ExpertFields`` is a mixin: a family's config lists it before its base config
(``class Qwen3MoeConfig(ExpertFields, Qwen3Config)``), so that its fields follow the base's
and precede the family's own; a family with other defaults declares the field again.
"""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.chips.moe_grouping import CHOICES
from theseus.core.components import option


@dataclass(unsafe_hash=True)
class ExpertFields:
    n_experts: int = option(8, "number of routed experts per MoE layer", ge=1)
    n_experts_per_token: int = option(2, "routed experts each token goes through (top-k)", ge=1)
    moe_d_ff: int = option(256, "hidden width of each routed expert", ge=1)
    norm_topk_prob: bool = option(True, "renormalise the chosen experts' scores to sum to 1")
    capacity_factor: float = option(
        0.0, "expert capacity = factor * tokens * k / experts; 0 = dropless", ge=0
    )
    moe_grouping: str = option(
        "auto",
        "dropless expert matmuls: auto (the faster one measured on the chip for the nearest "
        "shape: chips/measured.json; tiles where none is measured) | tiles (batched over "
        "per-expert tiles, routed FLOPs on every backend) | ragged_dot (jax.lax.ragged_dot: "
        "grouped on TPU, every expert elsewhere) | grouped (ragged_dot with theseus's "
        "weight-gradient kernel) | pallas (theseus's kernels for all three products); the "
        "last two are TPU kernels (elsewhere ragged_dot's products)",
        resume_safe=True,
        choices=CHOICES,
    )


# the experts of the MoE families' ``tiny`` presets
TINY_EXPERTS: dict = {"n_experts": 4, "n_experts_per_token": 2, "moe_d_ff": 32}
