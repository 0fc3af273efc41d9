"""Jobs, job keys and run names. A job is a class with a config schema and a ``__call__``."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.errors import JobError
from theseus.core.rundir import RunDir

if TYPE_CHECKING:
    from theseus.core.registry import Registries

KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*$")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def check_job_key(key: str) -> str:
    if not KEY_PATTERN.match(key):
        raise JobError(f"job key {key!r} is not a slash path of lowercase words")
    return key


def check_run_name(name: str) -> str:
    """Run names become directory names: no separators, no ``..``, nothing odd."""
    if not name or "/" in name or "\\" in name or ".." in name or not NAME_PATTERN.match(name):
        raise JobError(
            f"run name {name!r} is invalid: use letters, digits and ._+- (no path separators, "
            "no '..', not starting with a dot; '@' is reserved for RUN@STEP)"
        )
    if len(name) > 200:
        raise JobError(f"run name {name[:40]!r}... is longer than 200 characters")
    return name


def parse_reference(reference: str, key: str) -> tuple[str, int | None]:
    """``RUN`` or ``RUN@STEP`` (``--branch``, ``init.checkpoint``) -> (name, step or None)."""
    name, sep, step = reference.partition("@")
    check_run_name(name)
    if sep and not step.isdigit():
        raise JobError(f"{key}={reference!r}: {step!r} is not a step number (use RUN@STEP)")
    return name, int(step) if sep else None


def default_run_name(key: str) -> str:
    return key.replace("/", "-")


def unique_run_name(key: str, root: str | Path | None, when: dt.datetime | None = None) -> str:
    """A new run's default name for a one-shot job: ``<key-slug>-<YYYYmmdd-HHMMSS>`` (UTC),
    with ``-2``, ``-3``, ... when that folder exists already under ``root`` (two runs in one
    second; ``root`` None: a root that is not here, e.g. a dispatch target's)."""
    stamp = (when or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%S")
    base = f"{default_run_name(key)}-{stamp}"
    name, count = base, 1
    while root is not None and RunDir(root, name).path.exists():
        count += 1
        name = f"{base}-{count}"
    return name


def job_kind(key: str) -> str:
    """What a job does, for listings (``theseus runs --kind``): ``train`` for
    ``<model>/train/<recipe>``, ``data`` for ``data/...``, else the key's last word
    (``export``, ``import``, ``generate``, ``evaluate``, ``merge``, ``info``, ...)."""
    parts = key.split("/")
    if "train" in parts[1:-1]:
        return "train"
    if parts[0] == "data":
        return "data"
    return parts[-1]


@dataclass(frozen=True)
class Prerequisite:
    """Another job that must have finished (in the same root) before this one runs."""

    key: str
    name: str
    overrides: tuple[str, ...] = ()
    reason: str = ""
    # The folder the job writes, when known: a finished run whose output is gone runs again.
    output: str = ""


@dataclass
class JobContext:
    """What a running job gets besides its config."""

    root: str
    run: RunDir
    registries: Registries
    extra: dict[str, Any] = field(default_factory=dict)


class Job:
    """Base class of jobs: a typed config in, ``__call__`` does the work.

    ``config_type`` (optional) is a dataclass with one field per config group; the runner
    builds it from the validated config tree, so ``self.config.training.seq_len`` is an
    ``int`` (no casts). Without it the job gets a dataclass made from its groups.
    Subclasses may override :meth:`prerequisites` (jobs to finish first) and
    :meth:`dry_run` (``theseus run KEY --dry-run``).
    """

    config_type: type | None = None

    def __init__(self, config: Any, context: JobContext) -> None:
        self.config = config
        self.context = context

    @property
    def run(self) -> RunDir:
        return self.context.run

    @classmethod
    def prerequisites(cls, config: Any, root: str) -> list[Prerequisite]:
        """Jobs that must have finished in ``root`` before this one (default: none). A job
        whose ``prerequisites`` also takes ``run`` is given its :class:`RunDir` (a resumed
        run may keep the data it recorded)."""
        return []

    @classmethod
    def dry_run(
        cls, config: Any, root: str, as_json: bool = False, target: str | None = None
    ) -> Any:
        """Plan without running: the default prints the typed config (YAML, or one JSON line).

        ``target`` (``--target v5p-8``): plan for those chips; only jobs with a compiled step
        (training) override this to accept one."""
        import dataclasses
        import json

        import yaml

        if target:
            raise JobError(
                f"--target {target}: this job has no compiled step to plan for a chip; "
                "--target works with training jobs (<model>/train/pretrain, sft, dpo)"
            )

        plain = dataclasses.asdict(config)
        print(
            json.dumps(plain) if as_json else yaml.safe_dump(plain, sort_keys=False),
            end="\n" if as_json else "",
        )

    def __call__(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError
