"""Where a run's state comes from: another run's checkpoint, or the run's weight source.

:func:`open_run` is the one way to open a training run at a checkpointed step. Everything
that reads a run goes through it: the trainer's ``--branch``, ``init.checkpoint``, time
travel, evaluations, lm-eval, generation, ``hf/export`` and ``lora/merge``. It reads only:

* the record and the config: ``job.json`` names the job, ``config.yaml`` is read through
  that job's schema (with ``overrides`` on top, e.g. another mesh);
* the step: ``RUN@STEP`` must be a committed checkpoint (:meth:`RunDir.checkpointed_steps`),
  ``RUN`` is the newest one. Exactly that step is restored, shapes and digests verified; a
  damaged one is an error naming it (the reader never falls back to another step and never
  moves anything in the run it reads);
* the frozen weights a LoRA run (its base) or a DPO run (its reference) does not save: read
  again from the run's weight source (:class:`~theseus.core.train.weights.WeightSource`).

:func:`start_state` is step 0 of a new run: the seeded state, with the source's weights.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
from flax import nnx
from theseus.core.adapters import cast_frozen, split_trainable
from theseus.core.config import flatten, parse_overrides
from theseus.core.data import format as fmt
from theseus.core.data.api import run_dataset_path
from theseus.core.errors import ConfigError, JobError, TheseusError, one_line
from theseus.core.jobs import parse_reference
from theseus.core.plugins import registries as default_registries
from theseus.core.rundir import RunDir, checkpoint_step, missing_run
from theseus.core.runner import config_for, job_spec
from theseus.core.train.checkpoints import Checkpoints, abstract_of
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import PRETRAIN, Recipe
from theseus.core.train.setup import TrainSetup, open_data
from theseus.core.train.state import TrainState, split_params
from theseus.core.train.weights import placed_like

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


class OpenRunError(JobError):
    """A run that cannot be opened at the step asked for."""


@dataclass
class OpenedRun:
    """One training run at one checkpointed step: its typed config, setup and state."""

    root: str
    run: RunDir
    key: str  # the run's job, e.g. gpt/train/pretrain
    job_class: type
    step: int
    config: TrainJobConfig
    setup: TrainSetup
    state: TrainState
    _model: Any = field(default=None, repr=False)

    @property
    def model(self) -> Any:
        """The model with the checkpoint's parameters (a LoRA run's base included)."""
        if self._model is None:
            self._model = self.setup.model(self.setup.full_params(self.state))
        return self._model

    def plain_params(self) -> nnx.State:
        """Every parameter of the model as a plain (unadapted) model holds them: a LoRA
        run's adapters merged into its base. What ``init.checkpoint`` starts from."""
        if not self.setup.adapted:
            return self.state.params
        model = self.setup.model(self.setup.full_params(self.state))
        model.merge_adapters()
        return split_trainable(split_params(model)[1], True)[1]

    def data(self) -> TrainingData:
        """The run's batches, exactly as it trained on them (files checked by size only:
        reading a run records nothing in it)."""
        config = self.config
        sized = dataclasses.replace(config.data, verify="size")
        replaced = dataclasses.replace(config, data=sized)
        layout = self.setup.recipe.layout
        return open_data(replaced, self.root, layout, run=self.run, from_record=True)

    @property
    def tokenizer_dir(self) -> Path | None:
        """Where the run's tokenizer is; ``None`` when nowhere (see :func:`tokenizer_dir`)."""
        return tokenizer_dir(self.root, self.run, self.config)


def open_run(
    root: str | Path,
    reference: str,
    *,
    registries: Registries | None = None,
    what: str = "",
    error: type[TheseusError] = OpenRunError,
    overrides: Iterable[str] = (),
    into: TrainSetup | None = None,
) -> OpenedRun:
    """Run ``RUN`` (newest checkpoint) or ``RUN@STEP`` of ``root``, restored and verified.

    ``what`` names the option the reference came from in errors (``generate.run``), which
    are raised as ``error``. ``into``: restore into this setup (a branch continues the
    parent's state under its own config) instead of one built from the run's config.
    """

    prefix = f"{what}: " if what else ""
    registries = registries or default_registries()
    name, at = parse_reference(reference, what or "run")
    run = RunDir(root, name)
    if not run.exists():
        raise error(f"{prefix}{missing_run(run)}")
    try:
        record = run.read_record()
    except JobError as failure:
        raise error(f"{prefix}{failure}") from failure
    step = checkpoint_step(run, at, prefix, error)
    key = record.get("key")
    if not isinstance(key, str):
        raise error(f"{prefix}{run.record_path} names no job (no 'key')")
    spec = job_spec(key, registries)
    job_class = spec.load()
    config_type = getattr(job_class, "config_type", None)
    if not (isinstance(config_type, type) and issubclass(config_type, TrainJobConfig)):
        raise error(f"{prefix}run {name!r} is a {key} run, not a training run")
    config, lacking = _saved_config(run, spec, registries, overrides, prefix, error)
    lacks = f"lacks {lacking}: is it truncated?" if lacking else ""
    setup = into
    if setup is None:
        try:
            vocab_size = run_vocab_size(root, run, config)
            setup = TrainSetup.build(config, registries, vocab_size, recipe_of(job_class, config))
        except ConfigError as failure:  # e.g. a value cut short: max_seq_len: 6 (was 64)
            also = f"; it {lacks}" if lacks else ""
            raise error(f"{prefix}{run.config_path}: {failure}{also}") from failure
    saved = _restore(
        run, step, setup, prefix, error, f"; {run.config_path} {lacks}" if lacks else ""
    )
    if lacking:  # the checkpoint fits, so the defaults may be right (an older run)
        log.warning("%s lacks %s: their defaults are used", run.config_path, lacking)
    state = TrainState.from_saved(saved, frozen_weights(setup, str(root)))
    log.info("opened run %s at step %d (%s)", name, step, key)
    return OpenedRun(str(root), run, key, job_class, step, config, setup, state)


def recipe_of(job_class: type, config: TrainJobConfig) -> Recipe:
    """The recipe the run trained with (its objective, reference, batch fields), so a
    replayed step is the step it logged; pretraining's for a job that states none."""
    recipe = getattr(job_class, "recipe", None)
    return PRETRAIN if recipe is None else recipe(config)


def _saved_config(
    run: RunDir,
    spec: Any,
    registries: Registries,
    overrides: Iterable[str],
    prefix: str,
    error: type[TheseusError],
) -> tuple[TrainJobConfig, str]:
    """The run's typed config, and the schema keys its saved file lacks ("" if none)."""
    try:
        base = run.read_config()
        tree = config_for(spec, registries, [], base)
        tree.validate()
    except TheseusError as failure:
        reason = str(failure)
        if str(run.config_path) not in reason:
            reason = f"{run.config_path} does not fit {spec.key}: {reason}"
        raise error(f"{prefix}{reason}") from failure
    tree.apply(parse_overrides(list(overrides)))
    saved = {key for key, _ in flatten(base, tree=tree)}
    missing = [key for key in tree.keys() if key not in saved]
    lacking = ""
    if missing:
        listing = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        lacking = f"{len(missing)} key(s) ({listing})"
    try:
        return tree.to_object(spec.load().config_type), lacking
    except ConfigError as failure:
        raise error(f"{prefix}{run.config_path}: {failure}") from failure


def _restore(
    run: RunDir,
    step: int,
    setup: TrainSetup,
    prefix: str,
    error: type[TheseusError],
    hint: str,
) -> dict:
    """Checkpoint ``step`` restored into ``setup``'s abstract state (shapes and digests
    checked); one line naming the checkpoint when it cannot be."""

    failure = None
    try:
        checkpoints = Checkpoints.reader(run.checkpoint_dir)
        try:
            saved, _, _ = checkpoints.restore(
                step, setup.checkpointed_abstract, abstract_of(setup.data_rng())
            )
        finally:
            checkpoints.close()
    except Exception as caught:  # Orbax raises ValueError, KeyError, OSError, ...
        failure = caught
    if failure is None:
        return saved
    # a failed read leaves Orbax coroutines behind that print tracebacks when collected:
    # Checkpoints.close() collects them with stderr held, and the CLI exits without output
    # after its one line
    reason = one_line(failure)
    if len(reason) > 300:  # TensorStore errors carry a whole spec; -v shows everything
        reason = reason[:300] + " ..."
    if str(run.checkpoint_dir) in reason:  # says which checkpoint already
        raise error(f"{prefix}{reason}{hint}") from failure
    if not isinstance(failure, TheseusError):
        reason = f"{type(failure).__name__}: {reason}"
    directory = run.checkpoint_dir / str(step)
    raise error(f"{prefix}checkpoint {directory} cannot be restored: {reason}{hint}") from failure


# ---------------------------------------------------------------------------- the vocabulary


def dataset_dir(root: str | Path, config: TrainJobConfig, run: RunDir | None = None) -> Path:
    """The run's (first) tokenized dataset: ``<root>/data/<dataset>/<variant>``, as the run
    recorded it, else as its config names it."""
    return run_dataset_path(root, config.data, run.path if run is not None else None)


def run_vocab_size(root: str | Path, run: RunDir, config: TrainJobConfig) -> int:
    """The model's vocabulary: ``model.vocab_size``, else its tokenized dataset's."""
    if config.model.vocab_size:
        return int(config.model.vocab_size)
    metadata = dataset_dir(root, config, run) / fmt.METADATA
    if not metadata.is_file():
        raise OpenRunError(
            f"run {run.name!r} took its vocabulary from its tokenized data (model.vocab_size=0) "
            f"and {metadata} is gone: tokenize the data again to read the run"
        )
    return int(fmt.read_json(metadata)["tokenizer"]["vocab_size"])


def tokenizer_dir(root: str | Path, run: RunDir, config: TrainJobConfig) -> Path | None:
    """Where a run's tokenizer is: ``<run>/tokenizer/`` (an imported run's Hugging Face
    files), else the folder of an ``hf`` tokenizer's ``tokenizer.json`` (a run that trains
    an imported one, chat template and all), else the tokenized dataset's ``tokenizer/``;
    ``None`` when none is left on disk."""
    own = run.tokenizer_dir
    if (own / "tokenizer.json").is_file():
        return own
    data = config.data
    found = dataset_dir(root, config, run) / "tokenizer"
    if data.tokenizer == "hf" and data.tokenizer_options.get("path"):
        given = Path(str(data.tokenizer_options["path"])).expanduser()
        folder = given if given.is_dir() else given.parent
        dataset_json = found / "tokenizer.json"
        mine = folder / "tokenizer.json"
        if mine.is_file() and (
            not dataset_json.is_file() or dataset_json.read_bytes() == mine.read_bytes()
        ):
            return folder
    return found if found.is_dir() else None


# ---------------------------------------------------------------------------- weight sources


def source_weights(setup: TrainSetup, root: str, like: nnx.State) -> nnx.State:
    """The weights of ``setup.weights`` shaped and placed like ``like``: the Hugging Face
    folder's, the other run's (its adapters merged), or ``like`` itself (the seed)."""
    source = setup.weights
    if source.kind == "hf":
        return params_from_hf(setup.registries, source.location, like)
    if source.kind == "checkpoint":
        opened = open_run(
            root,
            source.location,
            registries=setup.registries,
            what="init.checkpoint",
        )
        return placed_like(opened.plain_params(), like, f"init.checkpoint={source.location}")
    return like


def params_from_hf(registries: Registries, directory: str, like: Any) -> Any:
    """A Hugging Face folder's parameters, checked against and placed like ``like``."""
    model = registries.hook.theseus_load_hf_model(directory=directory, dtype="")
    if model is None:
        raise ConfigError(
            f"init.hf: no installed plugin imports Hugging Face weights from {directory} "
            "(pip install theseus-models)"
        )
    _, params, _ = split_params(model)
    return placed_like(params, like, f"init.hf: {directory}")


def frozen_weights(setup: TrainSetup, root: str, fresh: TrainState | None = None) -> nnx.State:
    """What ``state.frozen`` holds (see ``TrainSetup.frozen``), read again from the source:
    a LoRA run's base (in ``lora.base_dtype``), a DPO run's reference, else nothing.
    ``fresh``: a seeded state of ``setup`` when the caller has one already."""
    if setup.frozen == "none":
        return nnx.State({})
    fresh = fresh if fresh is not None else setup.init_state()
    if setup.frozen == "base":
        base = source_weights(setup, root, fresh.frozen)
        return cast_frozen(base, setup.config.lora.base_dtype)
    return source_weights(setup, root, fresh.frozen)  # the reference: the initial weights


def start_state(setup: TrainSetup, root: str) -> TrainState:
    """Step 0 of a new run: a fresh optimizer state, the source's weights (new adapters on
    them for a LoRA run), and the frozen part its role asks for."""
    fresh = setup.init_state()
    if setup.frozen == "base":  # new adapters on the source's base
        return fresh.with_frozen(frozen_weights(setup, root, fresh))
    params = source_weights(setup, root, fresh.params)
    if setup.frozen == "reference":  # the same initial weights, apart
        copy = jax.tree.map(lambda x: x.copy(), params)
        return dataclasses.replace(fresh, params=params, frozen=copy)
    return dataclasses.replace(fresh, params=params)
