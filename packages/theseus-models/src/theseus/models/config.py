"""The config fields every model family shares (cheap to import: no JAX)."""

from __future__ import annotations

from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.errors import ConfigError
from theseus.core.execution import ExecutionPlan, compute_dtype
from theseus.core.ranges import first_problem
from theseus.models.attention_choice import IMPLEMENTATIONS, unplanned_kernel
from theseus.models.config_checks import shape_problems

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(unsafe_hash=True)
class ModelConfig:
    """Fields every family has (the trainer relies on the first four).

    Each family's config subclasses this with defaults for a small model (a quick CPU run).
    Hashable (``unsafe_hash``) so a model's graphdef can be a static argument of ``jax.jit``.
    """

    preset: str = option("", "size preset applied (`theseus presets` lists them); '' for none")
    vocab_size: int = option(0, "vocabulary size; 0 takes it from the tokenized data", ge=0)
    max_seq_len: int = option(256, "longest sequence the model accepts (positions)", ge=1)
    dtype: str = option(
        "auto",
        "compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU), float32, bfloat16, "
        "float16; params and optimizer state stay float32, softmax, norms and loss float32",
        resume_safe=True,
        choices=DTYPES,
    )
    n_layers: int = option(6, "number of transformer blocks", ge=1)
    d_model: int = option(384, "width of the residual stream", ge=1)
    n_heads: int = option(6, "number of query heads", ge=1)
    init_std: float = option(0.02, "standard deviation of the normal weight init", gt=0)
    attention: str = option(
        "auto",
        "attention implementation: auto | reference | flash | cudnn | splash (auto: cudnn on "
        "GPU, splash on TPU, else flash from 512 tokens, reference below)",
        resume_safe=True,
        choices=IMPLEMENTATIONS,
    )
    scan_unroll: int = option(
        1,
        "layers the scan over stacked blocks runs per iteration (n_layers: no loop at all); "
        "the same model, another compiled program (its own fusions)",
        resume_safe=True,
        ge=1,
    )

    def __post_init__(self) -> None:
        """Names that select code are checked when the config is built, naming the key."""
        problem = first_problem(self, "model", ranges=False)  # ranges: where it is set
        if problem:
            raise ConfigError(problem)
        problems = shape_problems(self)
        if problems:
            raise ConfigError(problems[0])


def unplanned_execution(config: ModelConfig) -> ExecutionPlan:
    """The plan of a model built without one (outside a training setup: an import, a test of
    one model): ``model.attention`` as named (the reference stages for ``auto``), no mesh,
    and ``model.dtype`` as the one rule (``theseus.core.execution.compute_dtype``) reads it
    on this process's backend."""
    import jax

    dtype, rule = compute_dtype(config.dtype, jax.default_backend())
    kernel = unplanned_kernel(config.attention)
    return ExecutionPlan(attention=kernel, compute_dtype=dtype, dtype_rule=f"{rule}, no plan")
