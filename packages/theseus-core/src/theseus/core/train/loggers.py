"""Extra metric loggers (TensorBoard, Weights & Biases, third-party), named in ``logging.loggers``.

Each is a registered component whose module is imported only when the user enables it.
The logger contract (``theseus_register_loggers``): ``target`` names a class

* ``Logger(run_dir, config)``: ``run_dir`` the run's ``theseus.core.rundir.RunDir``, ``config``
  the run's resolved config as a nested dict (what ``<run>/config.yaml`` holds; the built-in
  loggers read their options from it, e.g. ``logging.wandb``), built once on the main
  process before the first step;
* ``log(record: dict)``: one metrics record (``step`` plus host floats), as written to
  ``metrics.jsonl``;
* ``close()``: at the end of training, also when it fails;
* optionally ``check(config)`` (a classmethod or staticmethod): raise a ``TheseusError`` when
  the logger cannot work (a missing package, missing credentials). Every logger named is
  checked before any is built, so the run stops in one line before it writes anything.

A class whose constructor takes ``run_dir`` alone (the contract before the config was
passed) is still built that way.
"""

from __future__ import annotations

import dataclasses
import inspect
import netrc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from theseus.core import safe_yaml
from theseus.core.errors import TheseusError
from theseus.core.requirements import require
from theseus.core.train.configs import WandbConfig

if TYPE_CHECKING:
    from theseus.core.registry import Registries


class LoggerError(TheseusError):
    """A logger that is unknown, whose package is missing, or that cannot start."""


# ---------------------------------------------------------------------------- building


def as_dict(config: Any) -> dict[str, Any]:
    """The config as a plain nested dict (from typed dataclasses, a mapping, or None)."""
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return dict(config)


def saved_config(run_dir: Any) -> dict[str, Any]:
    """The resolved config the runner wrote to ``<run>/config.yaml`` for this attempt."""
    import yaml

    path = Path(run_dir.path) / "config.yaml"
    try:
        return safe_yaml.load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}


def logger_classes(registries: Registries, names: list[str]) -> list[tuple[str, type]]:
    """``(name, class)`` of each logger named, imported; an unknown name is an error."""
    classes = []
    for name in names:
        if name not in registries.loggers:
            raise LoggerError(f"logging.loggers: {registries.loggers.unknown_message(name)}")
        classes.append((name, registries.loggers.get(name).load()))
    return classes


def check_loggers(registries: Registries, names: list[str], config: Any) -> None:
    """Run each named logger's ``check(config)``: its problems surface before the run starts
    (a job can call this before its prerequisites; :func:`build_loggers` always does)."""
    _check(logger_classes(registries, names), as_dict(config))


def _check(classes: list[tuple[str, type]], settings: dict[str, Any]) -> None:
    for _, cls in classes:
        check = getattr(cls, "check", None)
        if callable(check):
            check(settings)


def build_loggers(
    registries: Registries, names: list[str], run_dir: Any, config: Any = None
) -> list[Any]:
    """The loggers ``names`` for ``run_dir``, each given the resolved ``config``.

    ``config`` (typed dataclasses or a dict) defaults to the run's saved ``config.yaml``.
    Every logger is checked before the first one is built.
    """
    settings = as_dict(config) if config is not None else saved_config(run_dir)
    classes = logger_classes(registries, names)
    _check(classes, settings)
    loggers: list[Any] = []
    try:
        for _, cls in classes:
            loggers.append(cls(run_dir, settings) if _takes_config(cls) else cls(run_dir))
    except BaseException:
        for logger in loggers:  # a later logger failed: close the ones already started
            logger.close()
        raise
    return loggers


def _takes_config(cls: type) -> bool:
    """Whether ``cls(run_dir, config)`` is accepted (else the one-argument contract)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists and dicts below the leaves as text."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)) or value is None:
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def _require(module: str, feature: str) -> Any:

    return require(module, feature, error=LoggerError)


# ---------------------------------------------------------------------------- TensorBoard


class TensorBoardLogger:
    """Scalars to ``<run>/tensorboard`` through tensorboardX; the config as text and hparams.

    The config shows in TensorBoard's Text tab (tag ``config``, the YAML of the run) and in
    the HParams tab (every leaf as ``group.key``, against ``train/loss`` and ``val/loss``).
    """

    @staticmethod
    def check(config: dict[str, Any]) -> None:
        _require("tensorboardX", "logging.loggers=[tensorboard]")

    def __init__(self, run_dir: Any, config: dict[str, Any]) -> None:
        import yaml

        tensorboardx = _require("tensorboardX", "logging.loggers=[tensorboard]")
        from tensorboardX.summary import hparams

        self.writer = tensorboardx.SummaryWriter(str(Path(run_dir.path) / "tensorboard"))
        text = yaml.safe_dump(config, sort_keys=False)
        # Markdown: indented lines are a code block, so the YAML keeps its layout.
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))
        experiment, session, _ = hparams(flatten(config), {"train/loss": 0.0, "val/loss": 0.0})
        for summary in (experiment, session):
            self.writer.file_writer.add_summary(summary)

    def log(self, record: dict) -> None:
        step = record.get("step", 0)
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


# ---------------------------------------------------------------------------- W&B

WANDB_HOST = "https://api.wandb.ai"
WANDB_ENV_MODES = {  # WANDB_MODE values wandb accepts -> what they mean here
    "online": "online",
    "run": "online",
    "shared": "online",
    "offline": "offline",
    "dryrun": "offline",
    "disabled": "disabled",
}


def wandb_options(config: dict[str, Any]) -> dict[str, Any]:
    """``logging.wandb`` of a config dict, with the defaults for missing keys."""

    options = dataclasses.asdict(WandbConfig())
    options.update((config.get("logging") or {}).get("wandb") or {})
    return options


def wandb_mode(options: dict[str, Any]) -> str:
    """``online``, ``offline`` or ``disabled``: ``logging.wandb.mode``, else WANDB_MODE,
    else online. A WANDB_MODE wandb would reject is an error naming it."""
    env = os.environ.get("WANDB_MODE")
    if env is not None and env not in WANDB_ENV_MODES:
        raise LoggerError(
            f"WANDB_MODE={env!r} is not a W&B mode (online, offline, disabled): "
            "fix or unset it (logging.wandb.mode sets the mode of a run)"
        )
    return options.get("mode") or WANDB_ENV_MODES.get(env or "online", "online")


def wandb_credentials() -> str | None:
    """Where wandb would find an API key without asking: the environment (WANDB_API_KEY,
    WANDB_IDENTITY_TOKEN_FILE) or a netrc entry for the W&B host (``wandb login`` writes
    one to ~/.netrc; NETRC moves it; WANDB_BASE_URL names a self-hosted server). None when
    there is none: wandb would then prompt, or fail after contacting the server."""
    for variable in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(variable):
            return variable
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or WANDB_HOST).netloc
    candidates = [os.environ["NETRC"]] if os.environ.get("NETRC") else ["~/.netrc", "~/_netrc"]
    for candidate in candidates:
        path = Path(candidate).expanduser()
        try:
            entry = netrc.netrc(str(path)).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            continue
        if entry and entry[2]:
            return str(path)
    return None


class WandbLogger:
    """Weights & Biases: one W&B run per theseus run (same id, so a resume continues it),
    with the resolved config as its config; files under ``<run>/wandb``.

    Options are ``logging.wandb.{project,entity,tags,mode}``; wandb's own environment
    variables (WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE, WANDB_API_KEY, WANDB_BASE_URL...)
    fill what they leave empty. Online mode needs credentials, checked before the run starts
    without contacting W&B.
    """

    @staticmethod
    def check(config: dict[str, Any]) -> None:
        _require("wandb", "logging.loggers=[wandb]")
        if wandb_mode(wandb_options(config)) != "online" or wandb_credentials():
            return
        raise LoggerError(
            "logging.loggers=[wandb] logs online but no W&B credentials were found: run "
            "`wandb login` or set WANDB_API_KEY, or set logging.wandb.mode=offline "
            "(`wandb sync` uploads later)"
        )

    def __init__(self, run_dir: Any, config: dict[str, Any]) -> None:
        self.check(config)
        wandb = _require("wandb", "logging.loggers=[wandb]")
        options = wandb_options(config)
        try:
            self.run = wandb.init(
                project=options["project"] or None,
                entity=options["entity"] or None,
                tags=list(options["tags"]) or None,
                mode=wandb_mode(options),
                name=run_dir.name,
                id=run_dir.name,
                resume="allow",
                dir=str(run_dir.path),
                config=config,
            )
        except Exception as error:  # wandb's errors are long; the cause fits one line
            message = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            raise LoggerError(f"logging.loggers=[wandb]: W&B did not start: {message}") from error

    def log(self, record: dict) -> None:
        step = record.get("step")
        self.run.log({k: v for k, v in record.items() if k != "step"}, step=step)

    def close(self) -> None:
        self.run.finish()
