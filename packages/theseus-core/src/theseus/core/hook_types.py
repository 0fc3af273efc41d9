"""What the hooks hand a plugin, as small protocols: the hook specifications name these,
never the classes of the training stack, so the type graph stays acyclic (a plugin gets
the real objects, which have every attribute listed here and more)."""

from __future__ import annotations

from typing import Any, Protocol


class DataOptions(Protocol):
    """A trainer's ``data`` group (``theseus.core.data.config.DataConfig``)."""

    dataset: str  # the registered dataset (or the first of ``mixture``)
    tokenizer: str  # the registered tokenizer kind
    vocab_size: int
    tokenizer_options: dict[str, Any]
    dataset_options: dict[str, Any]
    files: str
    max_documents: int
    suffix: str
    mixture: dict[str, float]


class AdapterOptions(Protocol):
    """The ``lora`` group of a training job (``theseus.core.train.configs.LoRAConfig``)."""

    rank: int
    alpha: float
    dropout: float
    targets: list[str]
    base_dtype: str


class TrainingSetup(Protocol):
    """A run's training setup (``theseus.core.train.setup.TrainSetup``), as a hook sees it."""

    config: Any  # the job's typed config (a ``TrainJobConfig``)
    graphdef: Any  # the model's graph (its execution plan inside), for ``nnx.merge``
    rest: Any  # the model's state that is not a parameter
    layout: Any  # the mesh and its shardings (``theseus.core.sharding.placement.Layout``)
    abstract_state: Any  # the train state as abstract arrays with their shardings

    @property
    def model_class(self) -> type:
        """The model's class (with adapters for LoRA)."""
        ...

    def full_params(self, state: Any) -> Any:
        """The model's parameters in ``state`` (a LoRA run's base included)."""
        ...

    @property
    def model_config(self) -> Any:
        """The model's config, its vocabulary filled in."""
        ...

    total_steps: int
    flops_per_token: float

    @property
    def tokens_per_step(self) -> int: ...
