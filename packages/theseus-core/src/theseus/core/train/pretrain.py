"""The training jobs: pretraining on packed tokens, SFT on padded chat rows."""

from __future__ import annotations

import json
import logging
from typing import Any

from theseus.core.jobs import Job, Prerequisite

log = logging.getLogger(__name__)


def check_init(config: Any, root: str) -> None:
    """``init.checkpoint`` must name a run with checkpoints, ``init.hf`` an existing folder."""
    from pathlib import Path

    from theseus.core.errors import JobError
    from theseus.core.rundir import RunDir

    if config.init.checkpoint:
        name = str(config.init.checkpoint).partition("@")[0]
        if not RunDir(root, name).checkpoint_dir.is_dir():
            raise JobError(f"init.checkpoint: run {name!r} has no checkpoints under {root}/runs")
    if config.init.hf and not Path(str(config.init.hf)).is_dir():
        raise JobError(f"init.hf: {config.init.hf} is not a directory of Hugging Face weights")


def check_evaluations(config: Any) -> None:
    """Unknown ``eval.tasks`` or options fail at start-up, not at the first evaluation."""
    from omegaconf import OmegaConf
    from theseus.core.evaluate.runner import check
    from theseus.core.plugins import registries

    if config.eval.tasks:
        options = OmegaConf.to_container(config.eval.options, resolve=True)
        check(list(config.eval.tasks), registries(), options)


class PretrainJob(Job):
    layout = "packed"

    @classmethod
    def prerequisites(cls, config: Any, root: str) -> list[Prerequisite]:
        from theseus.core.data.api import tokenize_prerequisites

        check_init(config, root)  # before any prerequisite spends time
        check_evaluations(config)
        return tokenize_prerequisites(config.data, root)

    @classmethod
    def dry_run(cls, config: Any, root: str) -> None:
        """Mesh, abstract state and per-device memory, printed; nothing is allocated."""
        from theseus.core.sharding.memory import dry_run

        dry_run(config, root)

    def __call__(self) -> dict[str, Any]:
        from theseus.core.sharding.distributed import initialize_from_env

        initialize_from_env()
        from theseus.core.train.trainer import Trainer

        trainer = Trainer(self.config, self.context, layout=self.layout)
        summary = trainer.fit()
        (self.run.path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        log.info("finished %s: %s", self.run.name, summary)
        return summary


class SFTJob(PretrainJob):
    layout = "padded"
