"""DeepSeek-V3: multi-head latent attention; dense layers first, then shared + routed experts
with sigmoid, bias-balanced, group-limited routing."""

from theseus.models.deepseek_v3.config import PRESETS, DeepseekV3Config
from theseus.models.family import Family

FAMILY = Family(
    name="deepseek_v3",
    config=DeepseekV3Config,
    model="theseus.models.deepseek_v3.model:DeepseekV3",
    description="DeepSeek-V3: MLA, shared + fine-grained routed experts, aux-loss-free balancing",
    presets=PRESETS,
    hf="theseus.models.deepseek_v3.hf",
)
