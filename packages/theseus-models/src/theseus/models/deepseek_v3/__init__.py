"""DeepSeek-V3: multi-head latent attention; dense layers first, then shared + routed experts
with sigmoid, bias-balanced, group-limited routing."""

from theseus.models.deepseek_v3.config import FAMILY

__all__ = ["FAMILY"]
