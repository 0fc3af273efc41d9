"""Extra metric loggers (TensorBoard, Weights & Biases, third-party), named in ``logging.loggers``.

Each is a registered component whose module is imported only when the user enables it;
``target`` names a class ``Logger(run_dir)`` with ``log(record: dict)`` and ``close()``.
"""

from __future__ import annotations

from typing import Any

from theseus.core.errors import TheseusError


class LoggerError(TheseusError):
    """A logger that is unknown or whose package is missing."""


def build_loggers(registries: Any, names: list[str], run_dir: Any) -> list[Any]:
    loggers = []
    for name in names:
        if name not in registries.loggers:
            raise LoggerError(f"logging.loggers: {registries.loggers.unknown_message(name)}")
        loggers.append(registries.loggers.get(name).load()(run_dir))
    return loggers


class TensorBoardLogger:
    """Scalars to ``<run>/tensorboard`` through tensorboardX."""

    def __init__(self, run_dir: Any) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as error:
            raise LoggerError(
                "logging.loggers: 'tensorboard' needs the tensorboardX package (pip install tensorboardX)"
            ) from error
        self.writer = SummaryWriter(str(run_dir.path / "tensorboard"))

    def log(self, record: dict) -> None:
        step = record.get("step", 0)
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Weights & Biases; project and mode from WANDB_PROJECT / WANDB_MODE, key from WANDB_API_KEY."""

    def __init__(self, run_dir: Any) -> None:
        try:
            import wandb
        except ImportError as error:
            raise LoggerError(
                "logging.loggers: 'wandb' needs the wandb package (pip install wandb)"
            ) from error
        self.run = wandb.init(
            name=run_dir.name, dir=str(run_dir.path), resume="allow", id=run_dir.name
        )

    def log(self, record: dict) -> None:
        step = record.get("step")
        self.run.log({k: v for k, v in record.items() if k != "step"}, step=step)

    def close(self) -> None:
        self.run.finish()
