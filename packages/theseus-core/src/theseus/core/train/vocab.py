"""The model's vocabulary against the data's tokenizer: equal, or the run refuses in one line.

``model.vocab_size=0`` takes the tokenized data's size. A real-size preset
(``model.preset=8b``) sets the published model's vocabulary (Llama 3's 128,256 tokens), so
data tokenized with another tokenizer (the default 8,192-token BPE) is refused, naming both
sizes and what to pass, rather than trained by a silently smaller model. The rule is
equality: an embedding with rows no token reaches is refused too (pass ``model.vocab_size``
to choose another size on purpose).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from theseus.core.errors import ConfigError

if TYPE_CHECKING:
    from theseus.core.registry import Registries
    from theseus.core.train.configs import TrainJobConfig


def preset_vocab(model: Any, registries: Registries | None) -> int:
    """The vocabulary ``model.preset`` sets (0: none, or no preset)."""
    if registries is None or not model.preset or model.name not in registries.models:
        return 0
    presets = registries.models.get(model.name).extra.get("presets", {})
    return int(presets.get(model.preset, {}).get("vocab_size", 0))


def check_vocab(
    config: TrainJobConfig, tokenizer_vocab: int, registries: Registries | None = None
) -> None:
    """Refuse a ``model.vocab_size`` (given, or set by a preset) other than the tokenizer's
    ``tokenizer_vocab``: one line naming ``model.preset``/``model.vocab_size``,
    ``data.tokenizer`` and both sizes."""
    model = config.model
    if not model.vocab_size or model.vocab_size == tokenizer_vocab:
        return
    tokenizer = f"data.tokenizer={config.data.tokenizer}"
    if preset_vocab(model, registries) == model.vocab_size:
        raise ConfigError(
            f"model.preset={model.preset} is the published model, whose vocabulary is "
            f"{model.vocab_size} tokens (model.vocab_size), but {tokenizer} has "
            f"{tokenizer_vocab} tokens: tokenize with that model's tokenizer (data.tokenizer=hf "
            f"'data.tokenizer_options={{path: .../tokenizer.json}}'), or pass "
            f"model.vocab_size={tokenizer_vocab} to train the data's vocabulary instead"
        )
    raise ConfigError(
        f"model.vocab_size={model.vocab_size} disagrees with the tokenizer's vocabulary of "
        f"{tokenizer_vocab} ({tokenizer}); leave model.vocab_size=0 to take it from the data"
    )
