"""What an evaluation runs against: a model, its tokenizer and (for perplexity) its data."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theseus.core.evaluate.errors import EvaluationError

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
    _scorer: Any = field(default=None, repr=False)

    @property
    def max_len(self) -> int:
        return int(self.model.config.max_seq_len)

    @property
    def scorer(self) -> Any:
        if self._scorer is None:
            from theseus.core.evaluate.scoring import Scorer

            self._scorer = Scorer(self.model, self.batch_size, self.pad_id, self.padding_side)
        return self._scorer

    @property
    def pad_id(self) -> int:
        return int(getattr(self.tokenizer, "pad_id", 0) or 0)

    def special_ids(self) -> set[int]:
        """Ids of the tokenizer's special tokens (they count zero bytes)."""
        ids = {int(self.tokenizer.eos_id), self.pad_id}
        for token in SPECIAL_TOKENS:
            found = self.tokenizer.special_id(token)
            if found is not None:
                ids.add(int(found))
        return ids

    def marker(self, token: str) -> list[int]:
        """A chat-template marker: its special id, else its text encoded."""
        found = self.tokenizer.special_id(token)
        return [int(found)] if found is not None else list(self.tokenizer.encode(token))

    def chat_prompt(self, user: str) -> list[int]:
        """``<|user|>text<|end|><|assistant|>`` as the SFT data renders it."""
        return (
            self.marker("<|user|>")
            + list(self.tokenizer.encode(user))
            + self.marker("<|end|>")
            + self.marker("<|assistant|>")
        )


def load_saved_tokenizer(directory: str | os.PathLike) -> Any:
    """A tokenizer saved by theseus-data (e.g. a tokenized dataset's ``tokenizer/``)."""
    try:
        from theseus.data import load_tokenizer
    except ImportError as error:
        raise EvaluationError(
            "evaluations need the theseus-data package for tokenizers: pip install theseus-data"
        ) from error
    return load_tokenizer(directory)


def load_hf_tokenizer(path: str | os.PathLike) -> Any:
    """A ``tokenizer.json`` (or a directory holding one) as a theseus-data tokenizer."""
    try:
        from theseus.data.tokenizers.huggingface import HFTokenizer
    except ImportError as error:
        raise EvaluationError(
            "evaluations need the theseus-data package for tokenizers: pip install theseus-data"
        ) from error
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise EvaluationError(f"no tokenizer.json at {path}: set evaluate.tokenizer")
    return HFTokenizer(file.read_text())


def checkpoint_target(root: str, reference: str, **options: Any) -> tuple[EvalTarget, dict]:
    """The model of run ``RUN`` (latest checkpoint) or ``RUN@STEP``, and where it came from."""
    from theseus.core.inspect.timetravel import checkpointed_steps, open_step
    from theseus.core.rundir import RunDir

    name, _, step_text = reference.partition("@")
    run = RunDir(root, name)
    run.read_record()  # a one-line error when the run does not exist
    steps = checkpointed_steps(run.path)
    if not steps:
        raise EvaluationError(f"run {name!r} has no checkpoints under {run.checkpoint_dir}")
    step = int(step_text) if step_text else steps[-1]
    moment = open_step(root, name, step)
    trainer = moment.trainer
    config = trainer.config
    target = EvalTarget(
        model=moment.model,
        tokenizer=load_saved_tokenizer(trainer.data.tokenizer_dir),
        root=str(root),
        data=config.data,
        seq_len=int(config.training.seq_len),
        seed=int(config.training.seed),
        layout=trainer.data.layout,
        **options,
    )
    return target, {"run": name, "step": step}


def hf_target(hf_dir: str, tokenizer: str = "", **options: Any) -> tuple[EvalTarget, dict]:
    """Imported Hugging Face weights (theseus-models) and their tokenizer."""
    from theseus.core.components import load_target

    load_hf = load_target("theseus.models.hf:load_hf")
    model = load_hf(hf_dir)
    tok = load_hf_tokenizer(tokenizer or hf_dir)
    if hasattr(model, "check_vocab"):
        model.check_vocab(tok.vocab_size)
    return EvalTarget(model=model, tokenizer=tok, **options), {"hf_dir": str(hf_dir)}
