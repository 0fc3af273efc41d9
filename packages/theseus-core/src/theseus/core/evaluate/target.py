"""What an evaluation runs against: a model, its tokenizer and (for perplexity) its data."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from theseus.core.evaluate.errors import EvaluationError
from theseus.core.plugins import registries as default_registries
from theseus.core.tokenizer import Tokenizer

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.registry import Registries
    from theseus.core.train.run_tokenizer import TokenizerOnly
    from theseus.core.train.setup import TrainSetup

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|pad|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
)


@dataclass
class EvalTarget:
    """A model (``model(tokens, positions=, segment_ids=) -> logits``) and what goes with it.

    ``data`` is the training run's ``data`` config node (``None`` for imported weights);
    ``seq_len``, ``seed`` and ``layout`` are the run's, for reading its validation split.
    """

    model: Any
    tokenizer: Any
    root: str = "."
    data: Any = None
    seq_len: int = 0
    seed: int = 0
    layout: str = "packed"
    batch_size: int = 8
    padding_side: str = "right"
    limit: int = 0
    # what an evaluation leaves for its caller to save beside the scores, by name (the
    # harness's results JSON of ``lm-eval``); the evaluate job and training write them
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    _scorer: Any = field(default=None, repr=False)

    @property
    def max_len(self) -> int:
        return self.model.config.max_seq_len

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            from theseus.core.evaluate.scoring import Scorer

            self._scorer = Scorer(self.model, self.batch_size, self.pad_id, self.padding_side)
        return self._scorer

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    def special_ids(self) -> set[int]:
        """Ids of the tokenizer's special tokens (they count zero bytes)."""
        ids = {self.tokenizer.eos_id, self.pad_id}
        for token in SPECIAL_TOKENS:
            found = self.tokenizer.special_id(token)
            if found is not None:
                ids.add(found)
        return ids

    def marker(self, token: str) -> list[int]:
        """A chat-template marker: its special id, else its text encoded."""
        found = self.tokenizer.special_id(token)
        return [found] if found is not None else list(self.tokenizer.encode(token))

    def chat_prompt(self, user: str) -> list[int]:
        """``<|user|>text<|end|><|assistant|>`` as the SFT data renders it."""
        return (
            self.marker("<|user|>")
            + list(self.tokenizer.encode(user))
            + self.marker("<|end|>")
            + self.marker("<|assistant|>")
        )


def load_tokenizer(path: str | os.PathLike, registries: Registries | None = None) -> Tokenizer:
    """A tokenizer from a tokenized dataset's ``tokenizer/``, a ``tokenizer.json`` or its
    directory, through the installed plugins (``theseus_load_tokenizer``)."""
    registries = registries or default_registries()
    found = registries.hook.theseus_load_tokenizer(path=str(path))
    if found is None:
        raise EvaluationError(
            f"no installed plugin loads a tokenizer from {path} (pip install theseus-data; "
            "or set evaluate.tokenizer to a tokenizer.json)"
        )
    return found


def run_target(
    setup: TrainSetup,
    data: TrainingData | TokenizerOnly,
    params: Any,
    root: str,
    **options: Any,
) -> EvalTarget:
    """A training run's model with ``params``, its tokenizer and its validation data."""
    config = setup.config
    return EvalTarget(
        model=setup.model(params),
        tokenizer=load_tokenizer(data.tokenizer_dir, setup.registries),
        root=root,
        data=dataclasses.replace(config.data, verify="size"),  # ``data`` opened it verified
        seq_len=config.training.seq_len,
        seed=config.training.seed,
        layout=data.layout,
        **options,
    )


def checkpoint_target(
    root: str,
    reference: str,
    overrides: list[str] | None = None,
    what: str = "evaluate.checkpoint",
    **options: Any,
) -> tuple[EvalTarget, dict]:
    """The model of run ``RUN`` (latest checkpoint) or ``RUN@STEP``, and where it came from.

    ``overrides`` change the run's config as it is opened, e.g. ``sharding.strategy=fsdp``
    to lay the parameters out another way on the devices of this process."""
    from theseus.core.train.opening import open_run

    opened = open_run(
        root,
        reference,
        what=what,
        error=EvaluationError,
        overrides=overrides or (),
    )
    params = opened.setup.full_params(opened.state)
    target = run_target(opened.setup, opened.data(), params, str(root), **options)
    return target, {"run": opened.run.name, "step": opened.step}


def hf_target(
    hf_dir: str, tokenizer: str = "", registries: Registries | None = None, **options: Any
) -> tuple[EvalTarget, dict]:
    """Imported Hugging Face weights and their tokenizer, through the installed plugins."""
    registries = registries or default_registries()
    model = registries.hook.theseus_load_hf_model(directory=str(hf_dir), dtype="")
    if model is None:
        raise EvaluationError(
            f"no installed plugin imports Hugging Face weights from {hf_dir} "
            "(pip install theseus-models)"
        )
    tok = load_tokenizer(tokenizer or hf_dir, registries)
    if tok.vocab_size > model.config.vocab_size:
        raise EvaluationError(
            f"the tokenizer has {tok.vocab_size} tokens but the model's "
            f"vocab_size={model.config.vocab_size}"
        )
    return EvalTarget(model=model, tokenizer=tok, **options), {"hf_dir": str(hf_dir)}
