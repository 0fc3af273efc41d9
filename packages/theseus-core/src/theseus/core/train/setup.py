"""The training setup: everything a train step needs, built once from the typed config.

The trainer, the dry-run memory report, time travel, evaluations and the benches all take
a :class:`TrainSetup`; none of them re-derives the mesh, the model graph, the optimizer,
the schedule or the step functions. Building it allocates nothing: the state exists only
as abstract arrays (with their shardings) until :meth:`TrainSetup.init_state` is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import optax
from flax import nnx
from theseus.core.chips.moe_grouping import ExpertShape
from theseus.core.data.api import open_training_data
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.data.loader import TrainingData
from theseus.core.errors import ConfigError
from theseus.core.execution import ExecutionPlan, RematChoice
from theseus.core.optim.build import build_optimizer, build_schedule
from theseus.core.sharding.placement import Layout
from theseus.core.train.chunked_loss import loss_chunks
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.execution_choice import MeshFacts, dtype_plan, plan_execution
from theseus.core.train.job_layout import job_layout
from theseus.core.train.model_builder import ModelBuilder
from theseus.core.train.recipe import PRETRAIN, ModelFn, Objective, Recipe
from theseus.core.train.remat_choice import ACCELERATORS, decide_remat
from theseus.core.train.state import TrainState
from theseus.core.train.step import Forward, cross_entropy, make_eval_step, make_train_step
from theseus.core.train.vocab import check_vocab
from theseus.core.train.weights import FrozenRole, WeightSource, frozen_role

if TYPE_CHECKING:
    from theseus.core.registry import Registries

BATCH_FIELDS = {
    "inputs": np.int32,
    "targets": np.int32,
    "positions": np.int32,
    "segment_ids": np.int32,
    "loss_mask": np.float32,
}


def plan_batch(
    config: TrainJobConfig, layout: str = "packed", mesh: Layout | None = None
) -> BatchPlan:
    """The run's :class:`BatchPlan` on ``mesh`` (default: the config's over every device):
    its global batch over the mesh's processes, its batch shards and micro-steps; ``layout``
    ``pairs`` keeps preference pairs whole. Computed once, after the mesh and before the data
    and the setup, which both take it."""
    mesh = mesh or job_layout(config)
    devices = list(mesh.mesh.devices.flat)
    return BatchPlan.of(
        config.training.global_batch_size,
        per_device=config.training.per_device_batch_size,
        batch_shards=mesh.batch_shards,
        processes=len({getattr(d, "process_index", 0) for d in devices}),
        pairs=layout == "pairs",
    )


def open_data(
    config: TrainJobConfig,
    root: str,
    layout: str = "packed",
    run: Any = None,
    from_record: bool = False,
    batch: BatchPlan | None = None,
) -> TrainingData:
    """This process's view of the run's batches (packed documents or padded chat rows).

    The files are verified as ``data.verify`` says; ``run`` (its :class:`RunDir`) keeps
    what this run hashed already, so its resumes check sizes only, and what data it trained
    on, which a resume must find again (``from_record``: the recorded folders, read only).
    Token ids are checked against the tokenizer's vocabulary, which is the model's (:func:`model_config`).
    ``batch``: the run's plan (default: :func:`plan_batch` on every device).
    """

    training = config.training
    return open_training_data(
        root,
        config.data,
        seq_len=training.seq_len,
        batch=plan_batch(config, layout) if batch is None else batch,
        seed=training.seed,
        layout=layout,
        process_index=jax.process_index(),
        run_dir=run.path if run is not None else None,  # its data record and verifications
        total_steps=training.steps(),
        from_record=from_record,
    )


def model_builder(config: TrainJobConfig, registries: Registries, configured: Any) -> ModelBuilder:
    """The run's model: the registered class (with adapters for a LoRA run) and its config."""
    model_class = registries.models.get(config.model.name).load()
    adapted = config.lora.rank > 0
    if adapted:
        model_class = adapt(registries, model_class, config)
    return ModelBuilder(model_class, configured, config.training.seed, adapted)


def first_plan(
    model: ModelBuilder, config: TrainJobConfig, layout: Layout
) -> tuple[ExecutionPlan, Any, float]:
    """The execution plan but its remat level (decided from the state's size, after, by
    ``decide_remat``; ``sharding.remat`` itself is checked when its config is built), the
    probe it was asked of (the model built abstract in the plan's compute dtype) and the
    model's training FLOPs per token."""
    dtype = dtype_plan(config, layout.platform)
    probe, flops_per_token = model.probe(config.training.seq_len, config.model.name, dtype)
    execution = plan_execution(
        probe,
        config.sharding,
        MeshFacts.of(layout),
        config.training.seq_len,
        config.model.name,
        dtype,
        float(getattr(model.config, "capacity_factor", 0.0) or 0.0),
        str(getattr(model.config, "moe_grouping", "auto")),
        ExpertShape.of(model.config),
    )
    return execution, probe, flops_per_token


def at_level(execution: ExecutionPlan, level: str) -> ExecutionPlan:
    """``execution`` with the remat level ``level``, for measuring what the level keeps."""
    return replace(execution, remat=RematChoice(level, "measured by sharding.remat=auto"))


def with_remat(
    execution: ExecutionPlan,
    config: TrainJobConfig,
    layout: Layout,
    state: TrainState,
    model: ModelBuilder,
    rest: Any,
    chunks: int,
    recipe: Recipe,
    batch: BatchPlan,
) -> tuple[ExecutionPlan, int]:
    """``execution`` with its remat level, and the loss's pieces: ``sharding.remat``, or for
    ``auto`` the most kept that fits the chip beside ``state`` (``remat_choice``), measured
    on the job's own step: its objective (DPO's pairs and reference, GRPO's
    log-probabilities) on one micro-step's rows of ``batch`` (the recipe's fields
    included), its frozen weights in ``state``. ``chunks`` stays, unless
    :func:`whole_loss_candidate` says to try the loss whole and it fits."""
    rows = batch.per_device * batch.batch_shards

    def decide(pieces: int) -> RematChoice:
        def objective_at(level: str) -> Objective:
            graphdef = model.graphdef(at_level(execution, level))
            given = config.training.loss_chunks
            return objectives(recipe, model, graphdef, rest, pieces, layout.batch_shards, given)[0]

        return decide_remat(
            config.sharding.remat,
            layout,
            state,
            abstract_batch(config, layout, recipe.extra_fields, rows),
            objective_at,
            compute_dtype=execution.compute_dtype,
            layers=getattr(model.config, "n_layers", 1),
            micro_steps=batch.micro_steps,
        )

    remat = decide(chunks)
    if whole_loss_candidate(config, layout, recipe, chunks, remat):
        whole = decide(1)
        if whole.level in WHOLE_LOSS_LEVELS:
            reason = f"{whole.reason}; the loss taken whole, its logits fitting beside it"
            return replace(execution, remat=RematChoice(whole.level, reason)), 1
    return replace(execution, remat=remat), chunks


#: the remat levels at which the loss is taken whole when its logits fit: the chunked loss
#: costs more than recomputing the MLPs' hidden projections (``mlp``). On a v5e, one piece
#: against the automatic count, in a step of the same defaults otherwise: a Mixtral-style
#: step (8 x 2,048 tokens, 32,000-token vocabulary) 0.257 s at ``mlp`` against 0.271 s in 8
#: pieces at ``none``; GPT-124M (32 x 1,024, 8,192) 0.260 s at ``mlp`` against 0.268 s in 4
#: pieces at ``none`` (bench/results/tpu_v5e_call16). A level that recomputes every matmul
#: (``attention``, ``full``) costs more than the pieces, so the loss stays in pieces there.
WHOLE_LOSS_LEVELS = ("none", "mlp")


def whole_loss_candidate(
    config: TrainJobConfig, layout: Layout, recipe: Recipe, chunks: int, remat: RematChoice
) -> bool:
    """Whether to try the loss whole: pieces chosen automatically (``training.loss_chunks``
    0) for next-token cross entropy (a recipe's objective sizes its own) with the remat
    level chosen by the chip's memory, at a level where a whole loss can still pay."""
    return (
        chunks > 1
        and config.training.loss_chunks == 0
        and config.sharding.remat == "auto"
        and recipe.objective is None
        and layout.platform in ACCELERATORS
        and remat.level in WHOLE_LOSS_LEVELS
    )


def optimization(
    config: TrainJobConfig, registries: Registries
) -> tuple[optax.Schedule, optax.GradientTransformation]:
    """The learning-rate schedule over the run's steps, and the optimizer that follows it."""
    schedule = build_schedule(
        registries, config.schedule, config.optimizer.learning_rate, config.training.steps()
    )
    return schedule, build_optimizer(registries, config.optimizer, schedule)


def objectives(
    recipe: Recipe,
    model: ModelBuilder,
    graphdef: Any,
    rest: Any,
    chunks: int,
    batch_shards: int = 1,
    given_chunks: int = 0,
) -> tuple[Objective, Objective | None]:
    """The step's objective and the validation's: the recipe's own for both, else
    next-token cross entropy (in ``chunks`` pieces for the step, whole for validation);
    ``batch_shards``: the ways the batch is split (a recipe's objective sizes its pieces by
    the rows of one device, unless ``given_chunks``, ``training.loss_chunks``, says)."""
    if recipe.objective is None:
        return cross_entropy(graphdef, rest, chunks), None
    forward = model_fn(graphdef, rest, batch_shards, given_chunks)
    made = recipe.objective(forward, model.adapted)
    return made, made


def adapt(registries: Registries, model_class: type, config: TrainJobConfig) -> type:
    """``model_class`` with LoRA adapters, from the plugin that adds them."""
    adapted = registries.hook.theseus_adapt_model(model_class=model_class, lora=config.lora)
    if adapted is None:
        raise ConfigError(
            f"lora.rank={config.lora.rank}: no installed plugin adds adapters to model "
            f"{config.model.name!r} (theseus-models does for models built from its layers)"
        )
    return adapted


def model_config(
    config: TrainJobConfig, vocab_size: int, registries: Registries | None = None
) -> Any:
    """The ``model`` group with the data's vocabulary.

    A ``model.vocab_size`` (given, or set by ``model.preset``) must be the tokenizer's
    ``vocab_size`` (:func:`~theseus.core.train.vocab.check_vocab`; ``registries`` names the
    preset in its message). The compute dtype is the execution plan's (:func:`first_plan`),
    decided on the mesh's platform, so a step compiled here for a TPU target runs in the
    TPU's dtype.
    """
    model, seq_len = config.model, config.training.seq_len
    check_vocab(config, vocab_size, registries)
    if seq_len > model.max_seq_len:
        raise ConfigError(
            f"training.seq_len={seq_len} is longer than model.max_seq_len={model.max_seq_len}"
        )
    return replace(model, vocab_size=vocab_size)


@dataclass
class TrainSetup:
    """Mesh, model graph, optimizer, schedule, jitted steps and the abstract train state."""

    config: TrainJobConfig
    registries: Registries
    layout: Layout
    builder: ModelBuilder  # the model's class (with adapters for LoRA), config and seed
    batch: BatchPlan  # rows per process, per device and micro-step (checked once)
    flops_per_token: float
    execution: ExecutionPlan  # kernel, context split, expert routing, remat, compute dtype
    loss_chunks: int  # pieces of the sequence the output head and loss take at a time
    graphdef: Any
    rest: Any
    optimizer: optax.GradientTransformation
    schedule: optax.Schedule
    frozen: FrozenRole  # what ``state.frozen`` holds: nothing, a LoRA base, a DPO reference
    abstract_state: TrainState  # ShapeDtypeStructs carrying the state's shardings
    state_shardings: TrainState
    make_state: Any  # ``make_state() -> TrainState``: the seeded state (jit it into place)
    #: the step's objective, ``objective(params, frozen, batch, key) -> (summed loss,
    #: (loss sum, count, metrics))``: the job's own (DPO's, GRPO's) or next-token cross entropy
    objective: Objective
    eval_objective: Objective | None  # the job's own (None: cross entropy, taken whole)
    recipe: Recipe  # the job's: its objective, reference, batch fields and batch source

    @classmethod
    def build(
        cls,
        config: TrainJobConfig,
        registries: Registries,
        vocab_size: int,
        recipe: Recipe = PRETRAIN,
        layout: Layout | None = None,
        batch: BatchPlan | None = None,
    ) -> TrainSetup:
        """Everything a run of ``recipe`` (the job's: its objective, reference and batch
        fields) needs, built once, mesh first: ``layout`` (default: the config's mesh over
        every device; a target's compile-only devices for a plan), then ``batch`` (the run's
        :func:`plan_batch` on it), then the model's execution plan, the model and the steps."""
        layout = layout or job_layout(config)
        batch = batch or plan_batch(config, recipe.layout, layout)
        if batch.batch_shards != layout.batch_shards:
            raise ValueError(f"{batch} was planned for another mesh than {layout.sizes}")
        schedule, optimizer = optimization(config, registries)
        configured = model_config(config, vocab_size, registries)
        model = model_builder(config, registries, configured)
        execution, probe, flops_per_token = first_plan(model, config, layout)
        frozen = frozen_role(model.adapted, recipe.reference)
        rest = model.rest(probe)
        make_state = model.fresh_state(optimizer, frozen, config.lora.base_dtype)
        abstract = jax.eval_shape(make_state)
        shardings = abstract.shardings(layout)  # refuses shapes the mesh cannot divide
        seq_len, vocab = config.training.seq_len, configured.vocab_size
        chunks = loss_chunks(
            batch.per_device, seq_len, vocab, layout.context, config.training.loss_chunks
        )
        state = abstract.abstract(shardings)
        execution, chunks = with_remat(
            execution, config, layout, state, model, rest, chunks, recipe, batch
        )
        graphdef = model.graphdef(execution)
        objective, eval_objective = objectives(
            recipe, model, graphdef, rest, chunks, layout.batch_shards, config.training.loss_chunks
        )
        return cls(
            config=config,
            registries=registries,
            layout=layout,
            builder=model,
            batch=batch,
            flops_per_token=flops_per_token,
            execution=execution,
            loss_chunks=chunks,
            graphdef=graphdef,
            rest=rest,
            optimizer=optimizer,
            schedule=schedule,
            frozen=frozen,
            objective=objective,
            eval_objective=eval_objective,
            recipe=recipe,
            abstract_state=state,
            state_shardings=shardings,
            make_state=make_state,
        )

    @property
    def model_config(self) -> Any:
        """The model's config as the run uses it (the data's vocabulary filled in)."""
        return self.builder.config

    @property
    def total_steps(self) -> int:
        return self.config.training.steps()

    @property
    def weights(self) -> WeightSource:
        """Where the initial (and a LoRA run's frozen) weights come from."""
        return WeightSource.of(self.config.init)

    @cached_property
    def train_step(self) -> Any:
        """Jitted ``step(state, batch) -> (state, metrics)``, the state donated."""
        training, layout = self.config.training, self.layout
        step = make_train_step(
            self.graphdef,
            self.rest,
            self.optimizer,
            self.schedule,
            self.batch.micro_steps,
            training.skip_nonfinite,
            micro_sharding=layout.micro_sharding(),
            grad_shardings=layout.grad_shardings(self.abstract_state.params),
            dropout_seed=training.seed if self.adapted and self.config.lora.dropout else None,
            objective=self.objective,
        )
        return layout.jit_step(step, self.state_shardings)

    @cached_property
    def eval_step(self) -> Any:
        """Jitted ``eval_step(params, frozen, batch) -> (loss sum, count, metrics)``."""
        shardings = self.state_shardings
        return self.layout.jit(
            make_eval_step(self.graphdef, self.rest, self.eval_objective),
            in_shardings=(shardings.params, shardings.frozen, self.layout.batch_sharding),
            out_shardings=self.layout.replicated,
        )

    @property
    def attention(self) -> str:
        """The attention kernel the step runs (``ring/flash`` when the sequence is split)."""
        return self.execution.attention.label()

    @property
    def remat(self) -> RematChoice:
        """The activation checkpointing level the step runs, and why."""
        return self.execution.remat

    @property
    def per_device(self) -> int:
        """Rows each device takes in one micro-step."""
        return self.batch.per_device

    @property
    def micro_steps(self) -> int:
        """Micro-steps whose gradients one update accumulates."""
        return self.batch.micro_steps

    # ------------------------------------------------------------------ state and model
    def init_state(self) -> TrainState:
        """The seeded state, created by a jitted init straight into its shardings."""
        return jax.jit(self.make_state, out_shardings=self.state_shardings)()

    def data_rng(self) -> jax.Array:
        """The dropout stream's key data, replicated on the mesh (saved with checkpoints)."""
        root_key = jax.random.key(self.config.training.seed)
        return self.layout.replicate(jax.random.key_data(jax.random.fold_in(root_key, 2)))

    @property
    def model_class(self) -> type:
        """The model's class (with adapters for LoRA)."""
        return self.builder.model_class

    def model(self, params: Any) -> Any:
        """The model with these parameters (every parameter: see :meth:`full_params`), for
        use outside the step: built in the plan unsplit (``ExecutionPlan.unsplit``: whole
        arrays, no mesh), as evaluations, time travel and generation run it."""
        return nnx.merge(self.unsplit_graphdef, params, self.rest)

    @cached_property
    def unsplit_graphdef(self) -> nnx.GraphDef:
        """The model's graph definition in the plan for whole arrays on one device."""
        return self.builder.graphdef(self.execution.unsplit())

    def full_params(self, state: TrainState) -> Any:
        """The model's parameters in ``state``: the trained ones and a LoRA run's frozen base
        (a DPO reference beside a fully trained model is not part of it)."""
        if self.frozen != "base":
            return state.params
        return nnx.merge_state(state.params, state.frozen)

    @property
    def vocab_size(self) -> int:
        return int(self.model_config.vocab_size)

    @property
    def adapted(self) -> bool:
        """Whether only adapters train (``lora.rank > 0``) on a frozen base."""
        return self.frozen == "base"

    @property
    def checkpointed_abstract(self) -> dict:
        """What a checkpoint holds (:meth:`TrainState.saved`): the state without its frozen
        weights, which are read again from their source on restore."""
        return self.abstract_state.saved()

    @property
    def extra_fields(self) -> Mapping[str, Any]:
        """Batch fields the objective reads beside ``BATCH_FIELDS`` (GRPO's advantages)."""
        return self.recipe.extra_fields

    def abstract_batch(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The global batch as abstract arrays, for lowering the step without data."""
        return abstract_batch(self.config, self.layout, self.extra_fields)

    @property
    def tokens_per_step(self) -> int:
        return self.config.training.global_batch_size * self.config.training.seq_len


def abstract_batch(
    config: TrainJobConfig,
    layout: Layout,
    extra_fields: Mapping[str, Any] | None = None,
    rows: int | None = None,
) -> dict[str, jax.ShapeDtypeStruct]:
    """The global batch (or ``rows`` of it) as abstract arrays (with the layout's sharding),
    for tracing and lowering the step without data."""
    shape = (rows or config.training.global_batch_size, config.training.seq_len)
    return {
        name: jax.ShapeDtypeStruct(shape, dtype, sharding=layout.batch_sharding)
        for name, dtype in {**BATCH_FIELDS, **(extra_fields or {})}.items()
    }


def model_fn(graphdef: Any, rest: Any, batch_shards: int = 1, loss_chunks: int = 0) -> ModelFn:
    """The step's forward pass over ``graphdef`` (:class:`Forward`)."""
    return Forward(graphdef, rest, batch_shards, loss_chunks)
