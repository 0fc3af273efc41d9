"""What plugins register: descriptions of components and jobs, cheap to import."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING
from theseus.core.errors import PluginError
from theseus.core.ranges import Range


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    factory: Any = None,
    resume_safe: bool = False,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    finite: bool = False,
    choices: tuple[str, ...] = (),
) -> Any:
    """A config field with a default (or required when no default) and a one-line help.

    ``resume_safe``: the value may change when a run resumes (logging, evaluation,
    checkpoint cadence, how long to train, how the work is laid out); a change to any
    other field changes the model or the training and is refused on resume.

    ``ge``/``gt``/``le``/``lt``: the valid range of a number (``>=``, ``>``, ``<=``, ``<``),
    checked when the config is built and shown by ``theseus config``; a float with a range
    (or ``finite=True``, for a float any finite value of which is valid) must be finite.
    Every int and float option declares one (``tests/core/test_ranges.py`` checks).

    ``choices``: the values a string option (or each item of a list of strings) may take,
    checked where ranges are and shown by ``theseus config``.
    """
    metadata: dict[str, Any] = {"help": help, "resume_safe": resume_safe}
    if finite or any(bound is not None for bound in (ge, gt, le, lt)):
        metadata["range"] = Range(ge=ge, gt=gt, le=le, lt=lt)
    if choices:
        metadata["choices"] = tuple(choices)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def load_target(target: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise PluginError(
            f"cannot import {module_name!r} ({error}): install the package that provides it"
        ) from error
    try:
        return getattr(module, attribute) if attribute else module
    except AttributeError as error:
        raise PluginError(f"{module_name!r} has no attribute {attribute!r}") from error


@dataclass(frozen=True)
class Component:
    """A registered model, dataset, tokenizer, optimizer, schedule, evaluation or logger.

    ``config`` is a dataclass schema (every field typed, with a default or required, and a
    help string); ``target`` is an import path loaded only when the component is used.
    """

    name: str
    config: type
    target: str
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Any:
        return load_target(self.target)

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.config):
            raise PluginError(f"component {self.name!r}: config must be a dataclass type")


@dataclass(frozen=True)
class Choice:
    """A config group whose schema is that of a component picked by ``<group>.name``."""

    registry: str
    default: str
    locked: bool = False  # the job key fixes the component (e.g. gpt/train/pretrain)


@dataclass(frozen=True)
class JobSpec:
    """A job under a slash key.

    ``groups`` maps top-level config keys to either a dataclass schema (fixed) or a
    :class:`Choice` (the component chosen by name brings its own schema).
    ``target`` names the job class, imported only when the job runs.
    ``resumes``: a run of the job started again under its name continues it (training,
    tokenizing), so the default name is the key's; ``False`` for a one-shot job (export,
    import, generate, evaluate), whose runs get a new default name each time.
    """

    key: str
    target: str
    description: str
    groups: Mapping[str, type | Choice] = field(default_factory=dict)
    resumes: bool = True

    def load(self) -> Any:
        return load_target(self.target)


def per_model_job(
    model: str, verb: str, target: str, description: str, group: tuple[str, type]
) -> JobSpec:
    """``<model>/<verb>``: a one-shot job on one registered model (its ``model`` group locked
    to it) with its own config group ``group`` (name, schema)."""
    return JobSpec(
        key=f"{model}/{verb}",
        target=target,
        description=description,
        groups={"model": Choice("models", model, locked=True), group[0]: group[1]},
        resumes=False,
    )
