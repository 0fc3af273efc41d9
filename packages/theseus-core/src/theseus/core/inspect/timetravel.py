"""Time travel: the exact state and batch of any checkpointed step of any run.

``step k`` means the state after k updates (checkpoint k) and the batch of index k, which
together produce the loss logged as step k.
"""

from __future__ import annotations

import dataclasses
import logging
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from theseus.core.errors import ConfigError, TheseusError, one_line
from theseus.core.inspect.runs import yaml_problem

if TYPE_CHECKING:
    from theseus.core.config import ConfigTree
    from theseus.core.data.loader import TrainingData
    from theseus.core.rundir import RunDir
    from theseus.core.train.setup import TrainSetup

log = logging.getLogger(__name__)


class InspectError(TheseusError):
    """A step, run or module that cannot be inspected."""


class Moment:
    """One run at one checkpointed step: its setup, state, batch and model."""

    def __init__(
        self, setup: TrainSetup, data: TrainingData, run: str, step: int, state: dict
    ) -> None:
        self.setup = setup
        self.data = data
        self.run = run
        self.step = step
        self.state = state
        self._model: Any = None
        self._view: Any = None

    # ------------------------------------------------------------------ data
    def batch(self) -> dict:
        """The batch of step k, exactly as training saw it."""
        return self.data.batch(self.step)

    @property
    def model(self) -> Any:
        """The model with the checkpoint's parameters (shared, not copied)."""
        if self._model is None:
            self._model = self.setup.model(self.setup.full_params(self.state))
        return self._model

    @property
    def view(self) -> Any:
        """The model unrolled, one block module per layer (``blocks.<i>.<name>``): what
        ``modules`` lists and ``capture`` runs. Its parameters are the checkpoint's arrays,
        except that blocks stacked over layers hold slices of them (copies)."""
        if self._view is None:
            self._view = self.model.unrolled()
        return self._view

    # ------------------------------------------------------------------ replay
    def replay(self) -> dict[str, Any]:
        """Recompute step k with the training step itself: loss, gradient norm and gradients."""
        import jax

        copy = jax.tree.map(lambda x: x.copy(), self.state)  # the step donates its input
        _, metrics = self.setup.train_step(copy, self.setup.layout.place_batch(self.batch()))
        return {
            "step": self.step,
            "loss": float(metrics["loss"]),
            "grad_norm": float(metrics["grad_norm"]),
            "grads": self._gradients(),
        }

    def _gradients(self) -> Any:
        import jax
        import jax.numpy as jnp
        from theseus.core.train.step import summed_loss

        batch = self.batch()

        def mean_loss(params: Any, frozen: Any) -> Any:
            setup = self.setup
            total, (_, count, _) = summed_loss(
                setup.graphdef, params, setup.rest, batch, frozen=frozen
            )
            return total / jnp.maximum(count, 1.0)

        return jax.jit(jax.grad(mean_loss))(self.state["params"], self.state["frozen"])

    # ------------------------------------------------------------------ modules
    def modules(self) -> dict[str, Any]:
        from theseus.core.inspect.capture import module_paths

        return module_paths(self.view)

    def module(self, path: str) -> Any:
        modules = self.modules()
        if path not in modules:
            close = get_close_matches(path, [p for p in modules if p], n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InspectError(f"no module {path!r} in run {self.run}{hint}")
        return modules[path]

    def capture(
        self, paths: list[str] | None = None, type_name: str | None = None
    ) -> dict[str, Any]:
        """Inputs and outputs of the named modules (or all of one type) on the step's batch."""
        from theseus.core.inspect.capture import recording

        if paths is None and type_name is None:
            chosen = {p: m for p, m in self.modules().items() if p}
        elif type_name is not None:
            chosen = {
                p: m for p, m in self.modules().items() if p and type(m).__name__ == type_name
            }
            if not chosen:
                raise InspectError(f"no module of type {type_name!r} in run {self.run}")
        else:
            chosen = {p: self.module(p) for p in paths}
        batch = self.batch()
        with recording(chosen) as captures:
            self.view(
                batch["inputs"], positions=batch["positions"], segment_ids=batch["segment_ids"]
            )
        return captures


def checkpointed_steps(run_path: Path) -> list[int]:
    from theseus.core.resume import committed_steps
    from theseus.core.rundir import RunDir

    return committed_steps(RunDir(run_path.parent.parent, run_path.name))


def read_config(run_dir: RunDir) -> dict[str, Any]:
    """A run's saved ``config.yaml`` as a mapping; ``InspectError`` naming the file if not."""
    path = run_dir.config_path
    try:
        data = path.read_bytes()
    except FileNotFoundError as error:
        raise InspectError(f"run {run_dir.name!r} has no config.yaml ({path})") from error
    except OSError as error:
        raise InspectError(f"{path} cannot be read: {error.strerror or error}") from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InspectError(f"{path} is not UTF-8 text (line {line})") from error
    try:
        base = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InspectError(f"{path} is not valid YAML: {yaml_problem(error)}") from error
    if not isinstance(base, dict) or not base:
        what = "empty" if not base else f"a YAML {type(base).__name__}, not a mapping"
        raise InspectError(f"{path} is {what}")
    return base


def _lacking(tree: ConfigTree, base: dict[str, Any]) -> str:
    """The keys of the job's schema that the saved config lacks, as a short phrase ("" if
    none): a truncated file, or one written before those keys existed."""
    from theseus.core.config import flatten

    saved = {key for key, _ in flatten(base, tree=tree)}
    missing = [key for key in tree.keys() if key not in saved]
    if not missing:
        return ""
    listing = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    return f"{len(missing)} key(s) ({listing})"


def open_step(root: str | Path, run: str, step: int, overrides: list[str] | None = None) -> Moment:
    """Restore run ``run`` at checkpoint ``step`` (with config overrides, e.g. a new mesh).

    Reads only: a damaged ``job.json``, ``config.yaml`` or checkpoint is an error naming the
    file, and nothing in the run directory is written.
    """
    from theseus.core.config import parse_overrides
    from theseus.core.plugins import registries
    from theseus.core.rundir import RunDir, read_record
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.checkpoints import abstract_of
    from theseus.core.train.setup import TrainSetup, open_data

    run_dir = RunDir(root, run)
    if not run_dir.exists():
        raise InspectError(f"no run named {run!r} under {root}")
    record = read_record(run_dir.record_path)
    steps = checkpointed_steps(run_dir.path)
    if step not in steps:
        nearest = sorted(steps, key=lambda s: (abs(s - step), s))[:2]
        listing = ", ".join(str(s) for s in sorted(nearest)) or "none"
        where = "" if steps else f" (nothing in {run_dir.checkpoint_dir})"
        raise InspectError(
            f"run {run!r} has no checkpoint at step {step}; nearest checkpointed steps: "
            f"{listing}{where}"
        )
    if not isinstance(record.get("key"), str):
        raise InspectError(f"{run_dir.record_path} names no job (no 'key')")
    regs = registries()
    spec = job_spec(record["key"], regs)
    job_class = spec.load()
    base = read_config(run_dir)
    try:
        tree = config_for(spec, regs, [], base)
        tree.validate()
    except TheseusError as error:
        raise InspectError(f"{run_dir.config_path} does not fit {spec.key}: {error}") from error
    tree.apply(parse_overrides(overrides or []))
    lacking = _lacking(tree, base)
    hint = f"; {run_dir.config_path} lacks {lacking}: is it truncated?" if lacking else ""
    config = tree.to_object(job_class.config_type)
    sized = dataclasses.replace(config.data, verify="size")  # read-only: no hashing record
    data = open_data(  # the data the run recorded, read only
        dataclasses.replace(config, data=sized),
        str(root),
        job_class.layout,
        run=run_dir,
        from_record=True,
    )
    try:
        setup = TrainSetup.build(config, regs, data.vocab_size)
    except ConfigError as error:  # e.g. a value cut short: max_seq_len: 6 (was 64)
        lacks = f"; it lacks {lacking}: is it truncated?" if lacking else ""
        raise InspectError(f"{run_dir.config_path}: {error}{lacks}") from error
    state = _restore(run_dir, step, setup, abstract_of(setup.data_rng()), hint)
    if lacking:  # the checkpoint fits, so the defaults may be right (an older run)
        log.warning("%s lacks %s: their defaults are used", run_dir.config_path, lacking)
    return Moment(setup, data, run, step, state)


def _restore(run_dir: RunDir, step: int, setup: TrainSetup, abstract_rng: Any, hint: str) -> Any:
    from theseus.core.train.checkpoints import Checkpoints

    directory = run_dir.checkpoint_dir / str(step)
    failure = None
    try:
        checkpoints = Checkpoints(run_dir.checkpoint_dir, 1000, 0, False)
        try:
            state, _, _ = checkpoints.restore(step, setup.checkpointed_abstract, abstract_rng)
        finally:
            checkpoints.close()
    except Exception as error:  # Orbax raises ValueError, KeyError, OSError, ...
        failure = error
    if failure is None:
        from theseus.core.train.base import frozen_base

        return {**state, "frozen": frozen_base(setup, str(run_dir.root))}
    # a failed read leaves Orbax coroutines behind that print tracebacks when collected:
    # Checkpoints.close() collects them with stderr held, and the CLI exits without output
    # after its one line
    reason = one_line(failure)
    if len(reason) > 300:  # TensorStore errors carry a whole spec; -v shows everything
        reason = reason[:300] + " ..."
    if str(run_dir.checkpoint_dir) in reason:  # says which checkpoint already
        raise InspectError(f"{reason}{hint}") from failure
    if not isinstance(failure, TheseusError):
        reason = f"{type(failure).__name__}: {reason}"
    raise InspectError(f"checkpoint {directory} cannot be restored: {reason}{hint}") from failure
