"""Every extension point of theseus, in one place, in the order theseus calls them.

A plugin is a module named by an entry point in the group ``theseus``::

    [project.entry-points.theseus]
    myplugin = "myplugin.plugin"

The module defines functions decorated with :data:`hookimpl` whose names match the specs
below; it may implement any subset. Core's own features (optimizers, schedules, the
training jobs) and theseus-models, theseus-data and theseus-dispatch register through these
same hooks, exactly like a third-party package. Core never imports a plugin package: where
it needs a tokenizer, Hugging Face weights, generation or a dataset, it asks these hooks.

The module holding your hooks is imported by every ``theseus`` command, so keep it cheap
to import (no JAX, no torch at module level; import them inside the hook bodies).

Call order (``theseus.core.plugins.load_registries`` and the runner/trainer follow it):

1. **Registration**, once per process, when the registries are first needed:
   ``models``, ``datasets``, ``tokenizers``, ``optimizers``, ``schedules``, ``evaluations``,
   ``loggers``, ``dispatch_targets``, ``rewards`` (each gets a ``register`` callback), then ``jobs``
   (which sees the filled component registries), then ``commands``.
2. **Before a job runs**: ``theseus_job_prerequisites`` (jobs that must have finished first),
   which for training jobs includes ``theseus_prepare_dataset`` (the job that tokenizes each
   dataset of the ``data`` config).
3. **Services while a job runs** (``firstresult``: the first plugin that answers wins, the
   others are not called; answer ``None`` for inputs you do not handle):
   ``theseus_load_tokenizer``, ``theseus_load_hf_model``, ``theseus_save_hf_model``,
   ``theseus_generate``, ``theseus_sampler``, ``theseus_adapt_model``.
4. **Training lifecycle**, in the trainer's loop: ``theseus_on_train_start``, then per
   recorded step ``theseus_on_step_end``, at each evaluation ``theseus_on_eval``, after each
   checkpoint ``theseus_on_checkpoint``, and once at the end ``theseus_on_train_end``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # leaf modules only: the hook types never import the training stack
    from theseus.core.hook_types import AdapterOptions, DataOptions, TrainingSetup
    from theseus.core.jobs import Prerequisite
    from theseus.core.model import Decoder, LanguageModel
    from theseus.core.registry import Registries
    from theseus.core.rundir import RunDir
    from theseus.core.sampler import Sampler, SamplerRequest
    from theseus.core.tokenizer import Tokenizer

PROJECT = "theseus"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# ============================================================================ 1. registration


@hookspec
def theseus_register_models(register: Callable[..., None]) -> None:
    """Register model families.

    Call ``register(Component(name="gpt", config=GPTConfig, target="pkg.module:GPT",
    extra={"presets": {"124m": {...}}}))``. ``config`` is the family's config dataclass;
    ``target`` names the ``flax.nnx.Module`` class built as ``Model(config, rngs=...)``;
    ``theseus.core.model`` documents what that class provides (``LanguageModel``).
    Core gives each registered model the jobs ``<name>/train/pretrain``,
    ``<name>/train/sft`` and ``<name>/evaluate`` (theseus-models adds ``<name>/generate``).
    """


@hookspec
def theseus_register_datasets(register: Callable[..., None]) -> None:
    """Register datasets: ``register(Component(name, config, target="pkg.module:Dataset"))``.

    ``target`` names a subclass of theseus-data's ``Dataset`` base class (module
    ``datasets.base`` of that package; its docstring is the contract: ``kind``,
    ``records()``, ``limit()``); ``config`` is a dataclass of the dataset's own options.
    theseus-data gives each registered dataset a ``data/tokenize/<name>`` job (the options
    are ``data.<option>`` there; a trainer passes them as ``data.dataset_options``) and
    prepares it for trainers through :func:`theseus_prepare_dataset`.
    """


@hookspec
def theseus_register_tokenizers(register: Callable[..., None]) -> None:
    """Register tokenizer kinds (``bpe``, ``hf``, ``tiktoken``, ``byte``, ...).

    ``extra={"trained": True}`` marks a kind trained on its dataset (a mixture then shares
    the vocabulary trained on its first dataset).
    """


@hookspec
def theseus_register_optimizers(register: Callable[..., None]) -> None:
    """Register optimizers.

    ``target`` names a function ``build(config, learning_rate) -> optax.GradientTransformation``
    where ``learning_rate`` is a schedule (a callable of the step). ``config`` must subclass
    ``theseus.core.optim.configs.OptimizerBase`` (a plugin that registers one that does not
    is refused when it loads); its docstring is the contract: core clips the gradients to
    ``grad_clip`` before the build's transformation and adds the decoupled ``weight_decay``
    after it, unless the config class sets ``applies_weight_decay = True``.
    """


@hookspec
def theseus_register_schedules(register: Callable[..., None]) -> None:
    """Register learning-rate schedules.

    ``target`` names a function ``build(config, peak_lr, total_steps) -> optax.Schedule``;
    ``config`` must subclass ``theseus.core.optim.configs.ScheduleBase`` (checked when the
    plugin loads).
    """


@hookspec
def theseus_register_evaluations(register: Callable[..., None]) -> None:
    """Register evaluations: ``target`` names ``run(config, target: EvalTarget) -> dict``."""


@hookspec
def theseus_register_loggers(register: Callable[..., None]) -> None:
    """Register metric loggers (TensorBoard, Weights & Biases...).

    ``target`` names a class ``Logger(run_dir, config)`` with ``log(record: dict)`` and
    ``close()``, and optionally ``check(config)`` (raise a ``TheseusError`` when it cannot
    work: called for every logger named before any is built). ``config`` is the run's
    resolved config as a nested dict (``<run>/config.yaml``). Its module is imported only
    when the user enables it (``logging.loggers=[name]``). A class taking ``run_dir`` alone
    (the earlier contract) is still built that way. ``theseus.core.train.loggers`` has the
    details and the built-in TensorBoard and W&B loggers. ``extra={"secrets": (NAME, ...)}``
    names the environment variables holding its credentials: the plan of a submit whose
    target forwards one of them while the logger is off says so.
    """


@hookspec
def theseus_register_dispatch_targets(register: Callable[..., None]) -> None:
    """Register dispatch backends (``ssh``, ``slurm``, ``volcano``, ``gcp-tpu``, ...)."""


@hookspec
def theseus_register_rewards(register: Callable[..., None]) -> None:
    """Register reward functions for reinforcement learning (``<model>/train/grpo``).

    ``target`` names ``reward(prompts, completions, **fields) -> list[float]``: one number
    per completion, given the prompt texts, the completion texts (both lists of the same
    length) and the task's fields as lists of the same length (``answer`` for the built-in
    tasks); accept ``**fields`` and ignore what you do not use. ``config`` is a dataclass of
    the reward's options (``NoOptions`` when it has none). A run names its rewards in
    ``grpo.rewards`` and weights them with ``grpo.reward_weights``.
    """


@hookspec
def theseus_register_jobs(register: Callable[..., None], registries: Registries) -> None:
    """Register jobs under slash keys.

    Call ``register(JobSpec(key="data/tokenize/fineweb", target="pkg.module:Job",
    description="...", groups={...}))``. ``registries`` holds every component registry
    filled by the hooks above, so a plugin can generate one job per model or dataset.
    The job class subclasses ``theseus.core.jobs.Job``: it receives its typed config (the
    groups as dataclass instances) and may override ``prerequisites`` and ``dry_run``.
    """


@hookspec
def theseus_register_commands(register: Callable[..., None]) -> None:
    """Add commands to the ``theseus`` CLI.

    Call ``register(name, function)`` with a Typer-compatible function (its signature
    and docstring become the command's arguments and help), or ``register(name, typer_app)``
    for a group of sub-commands. Keep heavy imports inside the function body.
    """


# ============================================================================ 2. before a job


@hookspec
def theseus_job_prerequisites(key: str, config: Any, root: str) -> list[Prerequisite]:
    """Jobs that must have finished, in the same root, before job ``key`` runs.

    Return a list of ``theseus.core.jobs.Prerequisite`` (possibly empty). ``config`` is the
    job's typed config. Called after the job's own ``Job.prerequisites``; every plugin's
    answer is used, in plugin order.
    """
    return []


@hookspec(firstresult=True)
def theseus_prepare_dataset(
    data: DataOptions, name: str, primary: str, root: str
) -> Prerequisite | None:
    """The job that prepares dataset ``name`` of a trainer's ``data`` config, or ``None``.

    ``data`` is a ``theseus.core.data.DataConfig``; ``primary`` is the first dataset of the
    mixture (a mixture shares its tokenizer). Return a ``Prerequisite`` whose job writes
    ``output``, a folder ``<root>/data/<name>/<variant>/`` named by what makes the data, in
    the format ``theseus.core.data.format`` reads (``output`` is "" while it cannot be named
    yet: a tokenizer file that does not exist); its ``key`` and ``overrides`` also form the
    command named when the data is missing.
    """


# ============================================================================ 3. services


@hookspec(firstresult=True)
def theseus_load_tokenizer(path: str) -> Tokenizer | None:
    """A tokenizer (``theseus.core.tokenizer.Tokenizer``) from ``path``, or ``None``.

    ``path`` is a tokenized dataset's ``tokenizer/`` directory, a directory holding a
    ``tokenizer.json``, or such a file.
    """


@hookspec(firstresult=True)
def theseus_load_hf_model(directory: str, dtype: str) -> LanguageModel | None:
    """A model (``LanguageModel``) from a Hugging Face checkpoint directory, or ``None``.

    ``dtype`` is the compute dtype (``""`` keeps the family's default). Raise a
    ``TheseusError`` for an architecture you recognise but cannot build.
    """


@hookspec(firstresult=True)
def theseus_save_hf_model(model: LanguageModel, directory: str) -> str | None:
    """Write ``model`` as a Hugging Face checkpoint directory; return its path, or ``None``."""


@hookspec(firstresult=True)
def theseus_generate(
    model: Decoder,
    prompts: list[list[int]],
    max_new_tokens: int,
    stop_tokens: list[int],
    pad_id: int,
) -> list[list[int]] | None:
    """Greedy continuations (token ids, prompt excluded) of each prompt, or ``None``.

    Used by the generation evaluations; answer ``None`` for a model you cannot decode.
    """


@hookspec(firstresult=True)
def theseus_sampler(setup: TrainingSetup, request: SamplerRequest) -> Sampler | None:
    """A compiled sampler of ``setup``'s model (``theseus.core.sampler.Sampler``), or ``None``.

    It decodes batches of ``request.rows`` prompts left-padded to ``request.prompt_width``
    over the setup's mesh with the trainer's parameters as they lie (sharded as the setup
    shards them), each process handing it its own rows. Row ``i`` draws every token from keys
    derived from its seed alone, so a row's completion does not depend on the other rows,
    the devices or the processes (a resumed RL run samples the same completions); the
    log-probabilities are those of softmax(logits / temperature), before top-k/top-p
    filtering. Used by ``<model>/train/grpo``; answer ``None`` for a model you cannot decode.
    """


@hookspec(firstresult=True)
def theseus_adapt_model(
    model_class: type[LanguageModel], lora: AdapterOptions
) -> type[LanguageModel] | None:
    """A subclass of ``model_class`` whose chosen linear layers carry LoRA adapters, or ``None``.

    ``lora`` is the run's ``lora`` config (``rank > 0``, ``alpha``, ``dropout``, ``targets``,
    ``base_dtype``). The adapter weights must be ``theseus.core.adapters.Adapter`` variables
    (carrying logical axis names like any parameter) and the adapted model must compute
    exactly the base model while every adapter's output is zero; the trainer then trains the
    adapters alone. The class also has ``merge_adapters()``, which folds every adapter into
    the weights it adapts, in place (``lora/merge``, exports, a run started from a LoRA run).
    Raise a ``TheseusError`` naming the target for a ``lora.targets`` entry the model does
    not have.
    """


# ============================================================================ 4. training


@hookspec
def theseus_on_train_start(setup: TrainingSetup, run: RunDir, step: int) -> None:
    """Training of ``run`` (a ``RunDir``) starts, or resumes, at ``step``.

    ``setup`` is the ``TrainSetup``: typed config, model graph, optimizer, mesh, steps.
    """


@hookspec
def theseus_on_step_end(
    step: int, metrics: dict[str, Any], setup: TrainingSetup
) -> dict[str, Any] | None:
    """A training step's metrics are about to be recorded (every ``logging.every`` steps).

    ``metrics`` holds host floats (``train/loss``, ``perf/mfu``...). Return a dict of extra
    metrics to record in the same line (or ``None``); do not mutate ``metrics``.
    """


@hookspec
def theseus_on_eval(step: int, results: dict[str, Any], run: RunDir) -> None:
    """Validation loss and ``eval.tasks`` results at ``step`` were recorded."""


@hookspec
def theseus_on_checkpoint(step: int, run: RunDir) -> None:
    """A checkpoint of ``step`` was handed to the (possibly asynchronous) writer."""


@hookspec
def theseus_on_train_end(summary: dict[str, Any], run: RunDir) -> None:
    """Training finished; ``summary`` is what ``summary.json`` will hold."""
