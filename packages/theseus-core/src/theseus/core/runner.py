"""Resolve a job key and overrides into a run, run its prerequisites, then the job."""

from __future__ import annotations

import inspect
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from theseus.core import safe_yaml, stop
from theseus.core.components import JobSpec
from theseus.core.config import ConfigTree
from theseus.core.config_sources import ConfigSource, parse_overrides, read_config_source
from theseus.core.console import RunLogHandler
from theseus.core.environment import check_root
from theseus.core.errors import JobError, PreemptedError, TheseusError
from theseus.core.init_sources import fill_from_init_sources
from theseus.core.jobs import (
    JobContext,
    check_job_key,
    check_run_name,
    default_run_name,
    parse_reference,
    unique_run_name,
)
from theseus.core.locks import exclusive
from theseus.core.plugins import registries as default_registries
from theseus.core.registry import Registries
from theseus.core.resume import (
    Change,
    check_changes,
    check_checkpoints,
    check_records,
    config_changes,
    history_entry,
)
from theseus.core.resume_schedule import settle_schedule
from theseus.core.rundir import RunDir, checkpoint_step, now
from theseus.core.sharding.distributed import process_group

log = logging.getLogger(__name__)
ROOT_ENV = "THESEUS_ROOT"


def default_root() -> str:
    return os.environ.get(ROOT_ENV) or "./runs"


def job_spec(key: str, registries: Registries) -> JobSpec:
    check_job_key(key)
    if key not in registries.jobs:
        raise JobError(registries.jobs.unknown_message(key))
    return registries.jobs.get(key)


def config_for(
    spec: JobSpec,
    registries: Registries,
    overrides: Iterable[str] = (),
    base: dict | None = None,
    configs: Iterable[ConfigSource] = (),
    root: str | None = None,
) -> ConfigTree:
    """The job's config tree: schema defaults, then ``base`` (a saved config), then the
    config files (or mappings) ``configs`` left to right, then the command-line overrides;
    then what ``init.hf`` / ``init.checkpoint`` (a run under ``root``, default: the default
    root) imply for ``model.*`` and the tokenizer."""
    tree = ConfigTree(spec, registries)
    if base:
        tree.merge(base)
    for source in configs:
        data, name = read_config_source(source)
        tree.merge(data, name)
    parsed = parse_overrides(overrides)
    tree.apply(parsed)
    fill_from_init_sources(tree, [key for key, _ in parsed], root or default_root())
    return tree


class PreparedRun:
    """A job with its resolved config and run directory, ready to be called."""

    def __init__(
        self,
        spec: JobSpec,
        tree: ConfigTree,
        root: str,
        name: str,
        registries: Registries,
        parent: str | None = None,
        fresh: bool = False,
    ) -> None:
        self.fresh = fresh
        self.spec = spec
        self.tree = tree
        self.root = root
        self.name = name
        self.registries = registries
        self.parent = parent
        self.run_dir = RunDir(root, name)
        self.changes: list[Change] = []  # resume-safe config changes of a resumed run

    @property
    def config(self) -> Any:
        return self.tree.node

    def typed_config(self, job_class: Any = None) -> Any:
        """The validated config as the job's typed dataclasses (built once per call)."""
        job_class = job_class or self.spec.load()
        return self.tree.to_object(job_class.config_type)

    def prerequisites(self, job_class: Any, config: Any) -> list[Any]:
        """The job's own prerequisites (given the run, to a job whose ``prerequisites``
        takes ``run``: a resumed run may keep what it recorded), then those every plugin
        adds for its key."""
        takes_run = "run" in inspect.signature(job_class.prerequisites).parameters
        extra = {"run": self.run_dir} if takes_run else {}
        own = list(job_class.prerequisites(config, self.root, **extra))
        added = self.registries.hook.theseus_job_prerequisites(
            key=self.spec.key, config=config, root=self.root
        )
        return own + [p for answer in added for p in answer]

    def dry_run(self, as_json: bool = False, target: str | None = None) -> Any:
        """``--dry-run``: the job's plan (memory report for training jobs), nothing run;
        ``target``: compiled for those chips (``v5p-8``, ``h100x8``)."""
        job_class = self.spec.load()
        config = self.typed_config(job_class)
        if target is None:  # jobs of third-party plugins may not take a target
            return job_class.dry_run(config, self.root, as_json)
        return job_class.dry_run(config, self.root, as_json, target=target)

    def __call__(self) -> Any:
        check_root(self.root)
        self.run_dir.check_own_folder()
        job_class = self.spec.load()
        config = self.typed_config(job_class)
        for prerequisite in self.prerequisites(job_class, config):
            run_prerequisite(prerequisite, self.root, self.registries)
        group = process_group()
        if group is not None and group.process_id != 0:  # process 0 holds the run for all
            return self._run_as_follower(job_class, config)
        what = f"run {self.name!r} under {self.root}"
        with exclusive(self.run_dir.path, what, "wait for it to finish, or choose another --name"):
            return self._run_locked(job_class, config)

    def _run_as_follower(self, job_class: Any, config: Any) -> Any:
        """Another process of a multi-process launch: it runs the job beside process 0 and
        writes no record (process 0 creates, checks and updates the run's records; on a
        shared file system a sibling's early writes would look like a run that lost them)."""
        context = JobContext(root=self.root, run=self.run_dir, registries=self.registries)
        handler = _file_handler(self.run_dir.log_path)
        try:
            return job_class(config, context)()
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()

    def _run_locked(self, job_class: Any, config: Any) -> Any:
        if self.fresh and self.run_dir.path.exists():
            shutil.rmtree(self.run_dir.path)
            self.fresh = False
        record = self.run_dir.create(self.spec.key, self.tree.to_yaml(), self.parent)
        attempt, started = record["attempts"] + 1, now()
        history = [*record["history"], history_entry(attempt, started, self.changes)]
        self.run_dir.update_record(
            status="running", started=started, attempts=attempt, error=None, history=history
        )
        context = JobContext(root=self.root, run=self.run_dir, registries=self.registries)
        handler = _file_handler(self.run_dir.log_path)
        handler.handle(log.makeRecord(  # in the run's log only: what rebuilds a lost job.json
            log.name, logging.INFO, __file__, 0, JOB_LINE, (self.name, self.spec.key, attempt),
            None,
        ))  # fmt: skip
        try:
            job = job_class(config, context)
            result = job()
        except PreemptedError as error:
            self.run_dir.update_record(status="preempted", stopped=now(), error=str(error))
            raise
        except KeyboardInterrupt:  # a signal where the job has no stop point of its own
            stopped = f"stopped by {stop.last_signal()} before it finished"
            self.run_dir.update_record(status="interrupted", stopped=now(), error=stopped)
            raise
        except BaseException as error:
            if not isinstance(error, TheseusError):  # the console shows an explained one in a line
                log.error("job %s failed", self.spec.key, exc_info=True)
            self.run_dir.update_record(
                status="failed", stopped=now(), error=f"{type(error).__name__}: {error}"
            )
            raise
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
        self.run_dir.update_record(status="finished", finished=now())
        return result


JOB_LINE = "run %s: job %s, attempt %d"  # the first line each attempt writes to run.log


def _file_handler(path: Path) -> logging.Handler:
    path.parent.mkdir(parents=True, exist_ok=True)

    handler = RunLogHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    if logging.getLogger().level > logging.INFO or logging.getLogger().level == 0:
        logging.getLogger().setLevel(logging.INFO)
    return handler


def prepare(
    key: str,
    overrides: Iterable[str] = (),
    *,
    root: str | os.PathLike | None = None,
    name: str | None = None,
    fresh: bool = False,
    branch: str | None = None,
    registries: Registries | None = None,
    configs: Iterable[ConfigSource] = (),
    dry_run: bool = False,
) -> PreparedRun:
    """Resolve a run: a new one, the same name again (resume), ``fresh`` or a ``branch``.

    Without ``name`` a job that resumes (training, tokenizing) is named after its key, so
    running it again continues it; a one-shot job (``JobSpec.resumes=False``: export,
    import, generate, evaluate) gets a new name each time (:func:`unique_run_name`).

    ``configs`` (YAML files or mappings) apply left to right before ``overrides``; on a
    resume or a branch they apply over the saved config, like overrides.

    ``dry_run``: the config as given, for a plan: a run of that name is neither read,
    checked nor resumed (a branch still starts from its parent's saved config).
    """
    registries = registries or default_registries()
    spec = job_spec(key, registries)
    root = str(root or default_root())
    if name is None:
        name = default_run_name(key) if spec.resumes else unique_run_name(key, root)
    name = check_run_name(name)
    run_dir = RunDir(root, name)
    overrides, configs = list(overrides), list(configs)
    if leads_the_run() and not dry_run:  # a folder that lost its records is never written into
        check_records(run_dir, fresh)
    if branch is not None:
        if run_dir.exists() and not fresh and not dry_run:
            raise JobError(
                f"run {name!r} already exists under {root}: branch into a new --name, or add "
                "--fresh to replace it"
            )
        parent_name, at = parse_reference(branch, "--branch")
        parent = RunDir(root, parent_name)
        parent_record = parent.read_record()
        if parent_record.get("key") != key:
            raise JobError(
                f"cannot branch job {key} from run {parent_name!r} of job {parent_record.get('key')}"
            )
        base = _saved_config(parent)
        tree = config_for(spec, registries, overrides, base, configs, root=str(root))
        check_branch_steps(spec, tree, branch, parent, at)
        return PreparedRun(spec, tree, root, name, registries, parent=branch, fresh=fresh)
    if run_dir.exists() and not fresh and not dry_run:
        record = run_dir.read_record()
        if record.get("key") != key:
            raise JobError(
                f"run {name!r} under {root} belongs to job {record.get('key')}, not {key}; "
                "choose another --name"
            )
        base = _saved_config(run_dir)
        tree = config_for(spec, registries, overrides, base, configs, root=str(root))
        saved = config_for(spec, registries, (), base, root=str(root)) if base else None
        changes = config_changes(saved, tree) if saved is not None else []
        check_changes(run_dir, record, changes, trains=spec.resumes)
        check_checkpoints(run_dir, record)
        settled = settle_schedule(run_dir, record, saved, tree) if saved is not None else None
        log.info("resuming run %s (%s)", name, run_dir.path)
        for change in changes:
            log.info("run %s: %s (allowed on resume, recorded in job.json)", name, change)
        if settled is not None:  # the run's length changed: what its lr schedule does
            log.info("%s", settled.note)
            changes += [settled.change] if settled.change is not None else []
        prepared = PreparedRun(spec, tree, root, name, registries, parent=record.get("parent"))
        prepared.changes = changes
        return prepared
    tree = config_for(spec, registries, overrides, configs=configs, root=str(root))
    return PreparedRun(spec, tree, root, name, registries, fresh=fresh)


def leads_the_run() -> bool:
    """Whether this process checks and writes the run's records: the only process, or
    process 0 of a multi-process launch. The others must not judge the folder: process 0
    may be creating it at that moment (config.yaml written, job.json not yet), which a
    follower took for a folder that lost its record, and exited, leaving process 0 to wait
    100 s for its heartbeats and abort."""
    group = process_group()
    return group is None or group.process_id == 0


def check_branch_steps(
    spec: JobSpec, tree: ConfigTree, branch: str, parent: RunDir, at: int | None
) -> None:
    """A training branch starts at its parent's step ``at`` (None: the newest checkpoint):
    its training must end after it."""
    training = getattr(tree.to_object(spec.load().config_type), "training", None)
    if training is None or not callable(getattr(training, "steps", None)):  # not training
        return
    start, steps = checkpoint_step(parent, at, "--branch: "), training.steps()
    if steps <= start:
        raise JobError(
            f"--branch {branch}: the branch starts at step {start}, and "
            f"training.total_steps={steps} ends it there or before: give "
            f"training.total_steps above {start}"
        )


def _saved_config(run_dir: RunDir) -> dict | None:
    if not run_dir.config_path.exists():
        return None
    try:
        saved = safe_yaml.load(run_dir.config_path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        why = safe_yaml.problem(error) if isinstance(error, yaml.YAMLError) else "not UTF-8"
        raise JobError(
            f"{run_dir.config_path} is not readable YAML ({why}); restore it, "
            "or rerun with --fresh to start the run over"
        ) from error
    if saved is not None and not isinstance(saved, dict):
        raise JobError(f"{run_dir.config_path} does not hold a config mapping")
    return saved


def run_prerequisite(prerequisite: Any, root: str, registries: Registries) -> None:
    run_dir = RunDir(root, prerequisite.name)
    output = getattr(prerequisite, "output", "")
    if run_dir.exists() and run_dir.read_record().get("status") == "finished":
        if not output or Path(output).exists():
            log.info(
                "prerequisite %s (run %s) already finished", prerequisite.key, prerequisite.name
            )
            return
        log.info(
            "prerequisite %s: its output %s is gone; running it again", prerequisite.key, output
        )
    log.info("running prerequisite %s as run %s", prerequisite.key, prerequisite.name)
    prepare(
        prerequisite.key,
        prerequisite.overrides,
        root=root,
        name=prerequisite.name,
        registries=registries,
    )()


def run(key: str, overrides: Iterable[str] = (), **kwargs: Any) -> Any:
    """Prepare and run a job in one call."""
    return prepare(key, overrides, **kwargs)()
