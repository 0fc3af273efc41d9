"""Fine-tuning needs weights to fine-tune: refused, in one line, when there are none.

Two recipes only make sense on a trained model, and without ``init.checkpoint`` or
``init.hf`` they would start from the seeded random initialisation without a word:

* LoRA (``lora.rank > 0``, any recipe) trains small adapters on a *frozen* base; on a random
  base the adapters learn to steer noise, and nothing of the result is usable (merged or as
  a PEFT folder, it is a random model).
* DPO and IPO score the policy against a frozen reference (the initial weights, or the base
  under LoRA); a random reference turns the preference margin into noise. (SimPO needs no
  reference: full fine-tuning with it from scratch is a choice, not an accident.)

Refusing rather than warning: a run that trains for hours and says "finished" is the
failure this prevents, and a warning in a long log is easy to miss; the fix is one key.
"""

from __future__ import annotations

from typing import Any

from theseus.core.errors import ConfigError


def check_starting_weights(config: Any) -> None:
    """Refuse a LoRA run, or a DPO/IPO run, with neither ``init.checkpoint`` nor ``init.hf``."""
    if config.init.checkpoint or config.init.hf:
        return
    fix = "set init.checkpoint=RUN[@STEP] (a run of yours) or init.hf=DIR (Hugging Face weights)"
    if config.lora.rank > 0:
        raise ConfigError(
            f"lora.rank={config.lora.rank} trains adapters on a frozen base, but no base is "
            f"given and a random one would be adapted: {fix}"
        )
    preference = getattr(config, "dpo", None)
    if preference is not None and preference.loss != "simpo":
        raise ConfigError(
            f"dpo.loss={preference.loss} compares the policy with a frozen reference, the "
            f"starting weights, but none are given and a random model would be both: {fix}"
        )
    rl = getattr(config, "grpo", None)
    if rl is not None:
        raise ConfigError(
            "GRPO improves a model that already answers sometimes: a random model's rewards "
            f"are all zero and nothing is learned; {fix}"
        )
