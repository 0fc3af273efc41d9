"""Config schemas of the evaluations and of the ``<model>/evaluate`` job (no JAX)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theseus.core.components import option
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.ranges import check_config
from theseus.core.requirements import missing_module_message


@dataclass
class EvaluateConfig:
    checkpoint: str = option("", "evaluate run RUN (latest checkpoint) or RUN@STEP of this root")
    hf_dir: str = option("", "or evaluate the Hugging Face weights in this directory")
    tokenizer: str = option("", "with hf_dir: a tokenizer.json ('' = <hf_dir>/tokenizer.json)")
    tasks: list[str] = option(help="registered evaluations to run", factory=lambda: ["val-ppl"])
    batch_size: int = option(8, "sequences per forward pass (scores do not depend on it)", ge=1)
    padding_side: str = option("right", "pad batched sequences on the 'left' or 'right'")
    limit: int = option(0, "at most this many examples per task (0: all)", ge=0)
    options: dict[str, Any] = option(
        help="per-task options, e.g. {hellaswag: {files: hs.jsonl}, addition: {max_digits: 2}}",
        factory=dict,
    )
    lm_eval_tasks: list[str] = option(
        help="lm-evaluation-harness tasks to run as well (the evaluation lm-eval)", factory=list
    )
    lm_eval_include_path: str = option("", "a folder of lm-eval task YAMLs for lm_eval_tasks")


@dataclass
class PerplexityConfig:
    rows: int = option(64, "validation rows to score (capped at the split's size)", ge=1)
    seq_len: int = option(
        0, "tokens per row (0: the run's training.seq_len, else max_seq_len)", ge=0
    )
    dataset: str = option(
        "",
        "a tokenized dataset under <root>/data: NAME (its one tokenization) or NAME/VARIANT "
        "('' = the run's training data)",
    )


@dataclass
class ChoiceConfig:
    files: str = option("", "local jsonl (comma-separated globs) in the dataset's schema")
    hf_path: str = option("", "Hugging Face dataset read when no files are given (online)")
    hf_name: str = option("", "the Hugging Face dataset's configuration name")
    split: str = option("validation", "split of the Hugging Face dataset")
    limit: int = option(0, "at most this many examples (0: all)", ge=0)


def choice_config(path: str, name: str, split_name: str) -> type:
    """A :class:`ChoiceConfig` whose online defaults point at one public dataset."""

    @dataclass
    class Config(ChoiceConfig):
        hf_path: str = option(path, "Hugging Face dataset read when no files are given")
        hf_name: str = option(name, "the Hugging Face dataset's configuration name")
        split: str = option(split_name, "split of the Hugging Face dataset")

    Config.__name__ = Config.__qualname__ = f"{path.split('/')[-1].title()}Config"
    return Config


@dataclass
class GSM8KConfig(ChoiceConfig):
    hf_path: str = option("openai/gsm8k", "Hugging Face dataset read when no files are given")
    hf_name: str = option("main", "the Hugging Face dataset's configuration name")
    split: str = option("test", "split of the Hugging Face dataset")
    max_new_tokens: int = option(256, "tokens generated per question", ge=1)
    chat: bool = option(False, "wrap the question in the chat template (SFT models)")


ADDITION_SPLITS = ("held-out", "training")


@dataclass
class AdditionEvalConfig:
    num_examples: int = option(100, "how many a+b problems", ge=1)
    max_digits: int = option(2, "operands have 1 to this many digits (as the training set)", ge=1)
    seed: int = option(1234, "generator seed (same seed, same problems)", ge=0)
    max_new_tokens: int = option(8, "tokens generated per problem", ge=1)
    limit: int = option(0, "at most this many examples (0: all)", ge=0)
    split: str = option(
        "held-out",
        "held-out: problems the addition training sets never contain; training: the ones "
        "they draw from (to check memorization)",
        choices=ADDITION_SPLITS,
    )
    shown: int = option(5, "problems logged with the model's answers at each evaluation", ge=0)

    def __post_init__(self) -> None:
        check_config(self, "addition")  # ranges and choices


LM_EVAL_FEATURE = "evaluating with lm-evaluation-harness"
LM_EVAL_EXTRA = "theseus-core[lm-eval]"


@dataclass
class LmEvalConfig:
    tasks: list[str] = option(help="lm-eval task or group names", factory=list)
    include_path: str = option("", "a folder of lm-eval task YAMLs (searched before lm-eval's own)")
    num_fewshot: int = option(-1, "few-shot examples per prompt (-1: each task's default)", ge=-1)
    limit: int = option(0, "at most this many examples per task (0: all)", ge=0)
    apply_chat_template: bool = option(False, "render prompts in the SFT chat template")
    max_gen_toks: int = option(256, "tokens generated when a task sets no max_gen_toks", ge=1)
    log_samples: bool = option(False, "keep every example's inputs and outputs in the JSON")
    bootstrap_iters: int = option(0, "bootstrap iterations for standard errors (0: none)", ge=0)

    def check(self) -> None:
        """Before any work: lm-eval is installed and tasks are named."""
        from importlib.util import find_spec

        if find_spec("lm_eval") is None:
            raise EvaluationError(missing_module_message("lm_eval", LM_EVAL_FEATURE, LM_EVAL_EXTRA))
        if not self.tasks:
            raise EvaluationError("lm-eval: name its tasks, e.g. {lm-eval: {tasks: [arc_easy]}}")
