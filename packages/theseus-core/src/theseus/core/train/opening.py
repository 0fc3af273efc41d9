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
from theseus.core.errors import ConfigError, TheseusError, one_line
from theseus.core.jobs import parse_reference
from theseus.core.plugins import registries as default_registries
from theseus.core.rundir import RunDir, checkpoint_step
from theseus.core.train.checkpoints import Checkpoints, abstract_of
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.run_tokenizer import RunTokenizer, TokenizerOnly, tokenizer_only
from theseus.core.train.saved_run import OpenRunError, recipe_of, saved_config, training_job
from theseus.core.train.setup import TrainSetup, open_data
from theseus.core.train.state import TrainState, split_params
from theseus.core.train.weights import placed_like

if TYPE_CHECKING:
    from theseus.core.data.loader import TrainingData
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


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

    def data(self) -> TrainingData | TokenizerOnly:
        """The run's batches, exactly as it trained on them (files checked by size only:
        reading a run records nothing in it); a run that read no dataset: its tokenizer."""
        config, recipe = self.config, self.setup.recipe
        if not recipe.reads_data:
            return tokenizer_only(self.root, config, recipe, self.setup.registries)
        sized = dataclasses.replace(config.data, verify="size")
        replaced = dataclasses.replace(config, data=sized)
        return open_data(replaced, self.root, recipe.layout, run=self.run, from_record=True)

    @property
    def tokenizer_dir(self) -> Path | None:
        """Where the run's tokenizer is; ``None`` when nowhere (``RunTokenizer.folder``)."""
        setup = self.setup
        found = RunTokenizer(self.root, self.run, self.config, setup.recipe, setup.registries)
        return found.folder()


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
    key, spec, job_class = training_job(run, registries, prefix, error)
    step = checkpoint_step(run, at, prefix, error)
    config, lacking = saved_config(run, spec, registries, overrides, prefix, error)
    lacks = f"lacks {lacking}: is it truncated?" if lacking else ""
    setup = into
    if setup is None:
        try:
            recipe = recipe_of(job_class, config)
            vocab_size = RunTokenizer(root, run, config, recipe, registries).vocab_size()
            setup = TrainSetup.build(config, registries, vocab_size, recipe)
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
