"""Qwen3-MoE: Qwen3 whose every MLP is a top-k routed mixture of SwiGLU experts.

What experts change in the model is ``layers/moe_decoder.py``'s ``SoftmaxExpertsDecoder``
(shared with Mixtral): each block reports its routing statistics, ``aux_losses`` turns them
into the load-balancing loss and router-health ``stat/`` entries (logged, not added to the
loss), and ``matmul_share`` counts k of the E experts a token goes through in the FLOPs.
"""

from __future__ import annotations

from theseus.models.layers.moe_decoder import SoftmaxExpertsDecoder
from theseus.models.qwen3.model import Qwen3
from theseus.models.qwen3_moe.config import Qwen3MoeConfig


class Qwen3Moe(SoftmaxExpertsDecoder, Qwen3):
    config: Qwen3MoeConfig
    config_class = Qwen3MoeConfig
