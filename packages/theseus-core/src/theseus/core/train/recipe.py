"""A job's recipe: everything a training job says about how it trains, in one object.

A job returns its :class:`Recipe` (``job_class.recipe(config)``), and everything that builds a
setup takes it: the run itself, ``open_run`` (time travel, ``--branch``, evaluations), the dry
run and step zero. Nothing else about the job reaches the setup or the trainer::

    recipe = job_class.recipe(config)
    setup = TrainSetup.build(config, registries, vocab_size, recipe)
    batches = recipe.batches(setup, data, run) if recipe.batches else data
    Trainer(setup, batches, context, callbacks=recipe.callbacks, validation=...)

Pretraining and SFT use the defaults (next-token cross entropy on the loader's batches); DPO
brings its objective and a frozen reference; GRPO its objective, its batch fields, its
rollouts as the batch source and its held-out accuracy as a callback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np

#: how the loader lays out rows: packed documents, padded chats, or preference pairs (row
#: 2p chosen, 2p + 1 rejected)
DataLayout = Literal["packed", "padded", "pairs"]


class ModelFn(Protocol):
    """The step's forward pass, what a job's objective is built on: the model of these
    weights (``frozen``: a LoRA base, else ``None``) on a batch, dropout from ``key``."""

    @property
    def batch_shards(self) -> int:
        """The ways a batch's rows are split over the devices."""
        ...

    @property
    def loss_chunks(self) -> int:
        """``training.loss_chunks``: the pieces an objective takes the head in (0: auto)."""
        ...

    def __call__(
        self, params: Any, frozen: Any, batch: Mapping[str, Any], key: Any
    ) -> tuple[Any, dict]:
        """``(logits_BxTxV, aux)``."""
        ...

    def hidden(
        self, params: Any, frozen: Any, batch: Mapping[str, Any], key: Any
    ) -> tuple[Any, Callable[[Any], Any], dict]:
        """``(hidden_BxTxD, head, aux)``: the final hidden states and the output head (a
        function of hidden states), for an objective that takes its logits a few positions
        at a time (``train/chunked_logps.py``)."""
        ...


#: ``objective(params, frozen, batch, key) -> (total, (loss sum, count, metrics))``
Objective = Callable[[Any, Any, Mapping[str, Any], Any], tuple[Any, Any]]

#: ``make(model_fn, adapted) -> objective``: a job's objective over the setup's forward pass
#: (``adapted``: only LoRA adapters train, ``frozen`` holds their base)
MakeObjective = Callable[[ModelFn, bool], Objective]


class BatchSource(Protocol):
    """Where a run's training batches come from: the loader's files, or GRPO's rollouts."""

    def iterator(self, start: int) -> Iterator[dict[str, np.ndarray]]:
        """Host batches of steps ``start``, ``start + 1``, ... (global rows of this process)."""
        ...

    def step_metrics(self, step: int) -> dict[str, float]:
        """Numbers about step ``step``'s batch for its metrics record (may be empty)."""
        ...


@runtime_checkable
class Replayable(Protocol):
    """A batch source that can make a past step's batch again from that step's state (GRPO's
    rollouts): what time travel replays a step with."""

    def replay_batch(self, step: int, state: Any) -> dict[str, np.ndarray]:
        """The batch step ``step`` trained on, made again from ``state`` (its start)."""
        ...


#: the type of a recipe's batch source, which its callbacks receive
Source = TypeVar("Source", bound=BatchSource)


@dataclass(frozen=True)
class TrainerParts(Generic[Source]):
    """What a recipe's callbacks are built from, once the trainer has made its writer."""

    setup: Any  # the TrainSetup
    batches: Source  # what the recipe's ``batches`` made (the loader's data by default)
    writer: Any  # the MetricsWriter of the run's metrics log
    flush: Callable[[], None]  # writes the pending training records first


@dataclass(frozen=True)
class Recipe(Generic[Source]):
    """How a job trains; the defaults are pretraining's. ``Source``: the type of the batch
    source ``batches`` makes, which ``callbacks`` are built on."""

    layout: DataLayout = "packed"
    #: the step's objective over the model (default: next-token cross entropy, its loss
    #: taken in pieces of the sequence where the logits would be large)
    objective: MakeObjective | None = None
    #: keep a frozen copy of the starting weights beside a fully trained model (a reference
    #: policy); under LoRA the base with its adapters off is the reference, no copy is kept
    reference: bool = False
    #: batch fields the objective reads beside the loader's, [B, T] arrays of these dtypes
    extra_fields: Mapping[str, Any] = field(default_factory=dict)
    #: ``batches(setup, data, run) -> BatchSource``: batches made while training (default:
    #: the loader's ``data`` itself)
    batches: Callable[[Any, Any, Any], Source] | None = None
    #: ``callbacks(parts) -> [Callback]``: the job's own, run after the trainer's
    callbacks: Callable[[TrainerParts[Source]], Sequence[Any]] | None = None
    #: whether the validation loss (the objective on validation batches) is evaluated
    validation: bool = True
    #: ``plan(setup) -> fields``: what the job adds to its dry run beside the step's plan
    #: (GRPO: its rollouts), with ``fits`` False when that does not fit its chip
    plan: Callable[[Any], Mapping[str, Any]] | None = None
    #: whether the run reads the datasets of its ``data`` group; False (GRPO: its task
    #: makes the prompts): none is tokenized or opened, ``data`` only names the tokenizer,
    #: which is the starting weights' (``train/run_tokenizer.py``)
    reads_data: bool = True

    def __post_init__(self) -> None:
        if self.layout not in ("packed", "padded", "pairs"):
            raise ValueError(f"Recipe.layout={self.layout!r}: expected packed, padded or pairs")
        if not self.reads_data and self.batches is None:
            raise ValueError("Recipe.reads_data=False: the recipe makes its batches (batches)")


PRETRAIN: Recipe[BatchSource] = Recipe()
